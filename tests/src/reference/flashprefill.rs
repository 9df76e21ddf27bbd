//! Plain-Rust reference of FlashPrefill V2's block selection (mean keys, block scores, block
//! lists), written from the definition in double precision, independent of the kernels.
//!
//! Definition (one prefill pass: `t` query rows at positions `pos0..kv_len`, `kv_len = pos0 + t`,
//! block size `B`):
//! - key block `J` holds cache rows `J·B .. min((J+1)·B, kv_len)`; `k̄_J` is their mean;
//! - query block `I` holds the pass positions `p` with `p / B = I`; its rows are those positions
//!   times the query heads of one KV head;
//! - row `r` at position `p` counts for causal `J <= I` when `p >= min((J+1)·B, kv_len) - 1`;
//!   `s = scale · q_r · k̄_J`, `m_{I,J} = max s`, `S_{I,J} = Σ exp(s - m)` over counted rows;
//! - `Score_{I,J} = S_{I,J} · exp(m_{I,J} - max_J' m_{I,J'})`, 0 for `J > I`;
//! - `J` is kept when `Score >= alpha · max Score`, `J < sink`, `I - J < window`, the query
//!   block is one of the pass's last `last_full`, or `J` is among the `min_budget` best scores
//!   (equal scores by lower `J`).

use lse_runtime::ops::{AttnShape, BlockLists, FlashPrefillParams};

/// Every stage of the reference selection.
#[derive(Clone, Debug)]
pub struct Selection {
    /// `[n_kv_heads, head_dim, n_kblocks]`: mean keys, as the kernels lay them out.
    pub pooled: Vec<f64>,
    /// `[n_kv_heads, n_qblocks, n_kblocks]`: block scores, 0 past the diagonal.
    pub scores: Vec<f64>,
    /// The kept blocks; entries past a row's count are 0.
    pub lists: BlockLists,
}

/// Block counts of a pass: `(qblock0, n_qblocks, n_kblocks)`.
pub fn blocks(shape: &AttnShape, block: usize) -> (usize, usize, usize) {
    let kv_len = shape.kv_len();
    let n_kblocks = kv_len.div_ceil(block);
    let qblock0 = shape.pos0 / block;
    (qblock0, n_kblocks - qblock0, n_kblocks)
}

/// Mean key of every key block over its valid rows; `k` is the cache `[rows, n_kv_heads,
/// head_dim]` widened to f32.
pub fn key_means(shape: &AttnShape, k: &[f32], block: usize) -> Vec<f64> {
    let (_, _, n_kblocks) = blocks(shape, block);
    let (nkv, hd, kv_len) = (shape.n_kv_heads, shape.head_dim, shape.kv_len());
    let mut pooled = vec![0.0; nkv * hd * n_kblocks];
    for h in 0..nkv {
        for jb in 0..n_kblocks {
            let rows = jb * block..((jb + 1) * block).min(kv_len);
            let n = rows.len() as f64;
            for d in 0..hd {
                let sum: f64 = rows
                    .clone()
                    .map(|r| f64::from(k[(r * nkv + h) * hd + d]))
                    .sum();
                pooled[(h * hd + d) * n_kblocks + jb] = sum / n;
            }
        }
    }
    pooled
}

/// Block scores from `q` (`[t, n_heads, head_dim]`) and mean keys in the kernels' layout.
pub fn block_scores(shape: &AttnShape, q: &[f32], pooled: &[f64], block: usize) -> Vec<f64> {
    let (qblock0, n_qblocks, n_kblocks) = blocks(shape, block);
    let (nh, nkv, hd) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    let g = nh / nkv;
    let kv_len = shape.kv_len();
    let mut scores = vec![0.0; nkv * n_qblocks * n_kblocks];
    for h in 0..nkv {
        for i in 0..n_qblocks {
            let qb = qblock0 + i;
            let positions = (qb * block).max(shape.pos0)..((qb + 1) * block).min(kv_len);
            // (m, S) per causal key block.
            let mut stats = Vec::new();
            for jb in 0..=qb {
                let last_of_j = ((jb + 1) * block).min(kv_len) - 1;
                let logits: Vec<f64> = positions
                    .clone()
                    .filter(|&p| p >= last_of_j)
                    .flat_map(|p| (0..g).map(move |gi| (p, h * g + gi)))
                    .map(|(p, head)| {
                        let row = &q[((p - shape.pos0) * nh + head) * hd..][..hd];
                        let dot: f64 = (0..hd)
                            .map(|d| f64::from(row[d]) * pooled[(h * hd + d) * n_kblocks + jb])
                            .sum();
                        f64::from(shape.scale) * dot
                    })
                    .collect();
                let m = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let s: f64 = logits.iter().map(|&x| (x - m).exp()).sum();
                stats.push((m, s));
            }
            let row_max = stats.iter().fold(f64::NEG_INFINITY, |a, &(m, _)| a.max(m));
            for (jb, &(m, s)) in stats.iter().enumerate() {
                scores[(h * n_qblocks + i) * n_kblocks + jb] = s * (m - row_max).exp();
            }
        }
    }
    scores
}

/// The kept key blocks of every row, from block scores.
pub fn select(shape: &AttnShape, scores: &[f64], params: &FlashPrefillParams) -> BlockLists {
    let block = params.block_size;
    let (qblock0, n_qblocks, n_kblocks) = blocks(shape, block);
    let mut lists = BlockLists {
        block_size: block,
        qblock0,
        n_qblocks,
        max_blocks: n_kblocks,
        blocks: vec![0; shape.n_kv_heads * n_qblocks * n_kblocks],
        counts: vec![0; shape.n_kv_heads * n_qblocks],
    };
    for h in 0..shape.n_kv_heads {
        for i in 0..n_qblocks {
            let qb = qblock0 + i;
            let row = (h * n_qblocks + i) * n_kblocks;
            let causal = &scores[row..row + qb + 1];
            let best = causal.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let threshold = f64::from(params.alpha) * best;
            // Best first; a stable sort keeps equal scores in ascending J.
            let mut ranked: Vec<usize> = (0..=qb).collect();
            ranked.sort_by(|&a, &b| causal[b].total_cmp(&causal[a]));
            let budget = &ranked[..params.min_budget.min(ranked.len())];
            let dense = i + params.last_full_blocks >= n_qblocks;
            let kept: Vec<u32> = (0..=qb)
                .filter(|&jb| {
                    dense
                        || causal[jb] >= threshold
                        || jb < params.sink_blocks
                        || qb - jb < params.window_blocks
                        || budget.contains(&jb)
                })
                .map(|jb| jb as u32)
                .collect();
            lists.blocks[row..row + kept.len()].copy_from_slice(&kept);
            lists.counts[h * n_qblocks + i] = kept.len() as u32;
        }
    }
    lists
}

/// The whole selection: `q` is `[t, n_heads, head_dim]`, `k` the key cache widened to f32.
pub fn flashprefill_select(
    shape: &AttnShape,
    q: &[f32],
    k: &[f32],
    params: &FlashPrefillParams,
) -> Selection {
    let pooled = key_means(shape, k, params.block_size);
    let scores = block_scores(shape, q, &pooled, params.block_size);
    let lists = select(shape, &scores, params);
    Selection {
        pooled,
        scores,
        lists,
    }
}
