//! Plain-Rust causal prefill attention, dense and block-sparse, for the attention kernels'
//! differential tests: one query row at a time, f64 dot products and a two-pass softmax
//! (maximum, then sums), with none of the kernels' tiling, online rescaling or masking.

use lse_runtime::ops::{AttnShape, BlockLists};

/// A KV cache's keys and values widened to f32 (exact for every dtype), `[rows, n_kv_heads,
/// head_dim]` each.
#[derive(Clone, Copy)]
pub struct KvF32<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// `out[r, h] = Σ_j softmax_j(scale · q[r, h] · k[j, kvh]) · v[j, kvh]` over cache rows
/// `j <= pos0 + r`; `[t, n_heads, head_dim]`.
pub fn causal(shape: &AttnShape, q: &[f32], kv: KvF32) -> Vec<f32> {
    attend(shape, q, kv, |_, _, _| true)
}

/// [`causal`] over the keys whose block `lists` keeps for (KV head, query block):
/// key `j` counts for the query at position `p` of KV head `kvh` when `j / block_size` is
/// among the first `counts` entries of the row of `(kvh, p / block_size)`.
pub fn block_sparse(shape: &AttnShape, q: &[f32], kv: KvF32, lists: &BlockLists) -> Vec<f32> {
    let b = lists.block_size;
    let kept = |kvh: usize, p: usize, j: usize| {
        let row = kvh * lists.n_qblocks + p / b - lists.qblock0;
        let n = lists.counts[row] as usize;
        lists.blocks[row * lists.max_blocks..][..n].contains(&((j / b) as u32))
    };
    attend(shape, q, kv, kept)
}

/// Attention of every query row over the causal keys `keep(kvh, position, key)` accepts.
fn attend(
    shape: &AttnShape,
    q: &[f32],
    kv: KvF32,
    keep: impl Fn(usize, usize, usize) -> bool,
) -> Vec<f32> {
    let (k, v) = (kv.k, kv.v);
    let d = shape.head_dim;
    let kv_row = shape.n_kv_heads * d;
    let mut out = vec![0.0f32; shape.t * shape.n_heads * d];
    for r in 0..shape.t {
        let p = shape.pos0 + r;
        for h in 0..shape.n_heads {
            let kvh = h / shape.group();
            let qv = &q[(r * shape.n_heads + h) * d..][..d];
            let keys: Vec<usize> = (0..=p).filter(|&j| keep(kvh, p, j)).collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let kj = &k[j * kv_row + kvh * d..][..d];
                    let dot: f64 = qv.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum();
                    dot * shape.scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = weights.iter().sum();
            let o = &mut out[(r * shape.n_heads + h) * d..][..d];
            for (i, o) in o.iter_mut().enumerate() {
                let acc: f64 = keys
                    .iter()
                    .zip(&weights)
                    .map(|(&j, w)| w * v[j * kv_row + kvh * d + i] as f64)
                    .sum();
                *o = (acc / total) as f32;
            }
        }
    }
    out
}
