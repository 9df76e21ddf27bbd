//! FlashPrefill stage D: each query block's list of key blocks to attend to
//! (`attention.block_select`).
//!
//! Per (KV head, query block `I` = `qblock0 + i`), a causal key block `J <= I` is kept when
//! any of these holds:
//! - its score is at least `alpha` times the row's largest score (`alpha = 0` keeps all);
//! - `J < sink` (attention sinks);
//! - `I - J < window` (the local window, diagonal included);
//! - `i + last_full >= n_qblocks` (the pass's last query blocks are dense);
//! - `J` is among the `min_budget` highest scores of the row, equal scores ordered by the
//!   lower `J`.
//!
//! The kept ids are written in ascending order at the start of the row's slice of `blocks`,
//! their number to `counts`; the rest of the slice is left as it was.

use loom::kernel;

/// `scores`: `[n_kv_heads, n_qblocks, n_kblocks]` (from `attention.block_score`); `blocks`:
/// `[n_kv_heads, n_qblocks, n_kblocks]`; `counts`: `[n_kv_heads, n_qblocks]`. The integer
/// parameters are at most `n_kblocks` (the launcher clamps them, which changes no decision).
/// Grid: x = n_qblocks, y = n_kv_heads.
///
/// Work-item `lid` takes key blocks `lid`, `lid + 64`, ... up to the diagonal:
/// 1. the row maximum, one workgroup `reduce_max`;
/// 2. the `min_budget` best blocks, one `argmax` round each. A round's candidates are the
///    blocks ranked after the previous round's winner (lower score, or equal score and higher
///    `J`), so no per-block marks are needed: after the last round, the chosen blocks are
///    exactly those ranked at or before the last winner. Rounds stop at the number of causal
///    blocks.
/// 3. compaction, 64 blocks at a time: an inclusive prefix sum of the keep flags in shared
///    memory (Hillis-Steele, 6 steps) gives each kept block its slot.
#[kernel(name = "attention.block_select", version = 1, workgroup = 64)]
fn block_select(
    scores: &[f32; num_groups_y() * num_groups() * n_kblocks],
    blocks: &mut [u32; num_groups_y() * num_groups() * n_kblocks],
    counts: &mut [u32; num_groups_y() * num_groups()],
    qblock0: u32,
    n_kblocks: u32,
    alpha: f32,
    sink: u32,
    window: u32,
    last_full: u32,
    min_budget: u32,
) {
    const WG: u32 = 64;
    const LOG_WG: u32 = 6;
    let scan = shared::<u32>(WG);
    let lid = local_id();
    let i = group_id();
    let n_qblocks = num_groups();
    let kvh = group_id_y();
    let qb = qblock0 + i;
    let row = (kvh * n_qblocks + i) * n_kblocks;
    let n_jchunks = (qb >> 6) + 1;
    let dense = i + last_full >= n_qblocks;

    // 1. The threshold.
    let mut my_max = f32::NEG_INFINITY;
    for jc in 0..n_jchunks {
        let j = jc * WG + lid;
        if j <= qb {
            my_max = max(my_max, scores[row + j]);
        }
    }
    let threshold = alpha * reduce_max(my_max);

    // 2. The last of the `min_budget` best blocks, `(cut_v, cut_j)`.
    let rounds = min(min_budget, qb + 1);
    let mut cut_v = f32::INFINITY;
    let mut cut_j: u32 = 0;
    for _r in 0..rounds {
        let mut best_v = f32::NEG_INFINITY;
        let mut best_j = u32::MAX;
        for jc in 0..n_jchunks {
            let j = jc * WG + lid;
            if j <= qb {
                let v = scores[row + j];
                // Ranked after the previous winner (the first round takes every block: no
                // score is infinite), and better than what this work-item found so far
                // (ascending `j`, so a tie keeps the lower `j`).
                let after = v < cut_v || (v == cut_v && j > cut_j);
                if after && v > best_v {
                    best_v = v;
                    best_j = j;
                }
            }
        }
        let (v, jw) = argmax(best_v, best_j);
        cut_v = v;
        cut_j = jw;
    }

    // 3. Keep flags and compaction.
    let mut kept: u32 = 0;
    for jc in 0..n_jchunks {
        let j = jc * WG + lid;
        let v = scores[row + min(j, qb)];
        let keep = j <= qb
            && (dense
                || v >= threshold
                || j < sink
                || qb - j < window
                || (rounds > 0 && (v > cut_v || (v == cut_v && j <= cut_j))));
        let flag = keep as u32;
        scan[lid] = flag;
        barrier();
        for step in 0..LOG_WG {
            let off = 1u32 << step;
            let add = if lid >= off { scan[lid - off] } else { 0 };
            barrier();
            scan[lid] += add;
            barrier();
        }
        if keep {
            blocks[row + kept + scan[lid] - 1] = j;
        }
        kept += reduce_sum(flag);
    }
    if lid == 0 {
        counts[kvh * n_qblocks + i] = kept;
    }
}
