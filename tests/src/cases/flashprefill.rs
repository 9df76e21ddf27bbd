//! Differential cases of FlashPrefill V2's selection kernels (`attention.key_block_mean_<ty>`,
//! `attention.block_score`, `attention.block_select`) against
//! [`crate::reference::flashprefill`]: mean keys and block scores within a tolerance, block
//! lists exactly except in rows whose decision lies within rounding of a boundary.

use lse_runtime::device::Device;
use lse_runtime::ops::{self, AttnShape, BlockLists, FlashPrefillParams};

use super::{boxed, shape, Dtype, Stored};
use crate::diff::{compare, Case, Out, Rng, Tol};
use crate::reference::flashprefill as reference;

/// Random inputs with structure: each key block of each KV head has its own centre (random
/// direction, a strength that varies by block) plus per-token noise, and each query block
/// its own direction per head plus noise, so block scores spread over several units and the
/// threshold keeps some blocks and drops others.
pub struct SelectCase {
    pub kv: Dtype,
    pub shape: AttnShape,
    pub params: FlashPrefillParams,
    /// Cache rows past `kv_len` (filled with huge values that must not be read).
    pub extra_rows: usize,
    pub seed: u64,
}

/// Relative distance from the threshold (and between the budget's last member and the next
/// block) under which a row's list is not compared: the device's f32 scores may round to the
/// other side.
pub const DECISIVE: f64 = 1e-4;

impl SelectCase {
    /// The queries and the key cache (in the case's dtype).
    pub fn inputs(&self) -> (Vec<f32>, Stored) {
        let s = &self.shape;
        let mut rng = Rng(self.seed);
        let row = s.n_kv_heads * s.head_dim;
        let n_kblocks = s.kv_len().div_ceil(self.params.block_size);
        let centres: Vec<f32> = (0..n_kblocks * row)
            .map(|i| {
                let strength = 0.5 + ((i / row) * 7 % 5) as f32 * 0.4;
                rng.f32(strength)
            })
            .collect();
        let mut k = Vec::with_capacity((s.kv_len() + self.extra_rows) * row);
        for r in 0..s.kv_len() {
            let jb = r / self.params.block_size;
            k.extend((0..row).map(|c| centres[jb * row + c] + rng.f32(0.5)));
        }
        k.extend((0..self.extra_rows * row).map(|i| if i % 2 == 0 { 3.0e4 } else { -1.0e4 }));
        // Queries of one block share a direction per head (as real queries are correlated),
        // so one block's logits against a key block move together.
        let q_row = s.n_heads * s.head_dim;
        let q_dirs = rng.f32s(n_kblocks * q_row, 6.0);
        let q = (0..s.t * q_row)
            .map(|i| {
                let qb = (s.pos0 + i / q_row) / self.params.block_size;
                q_dirs[qb * q_row + i % q_row] + rng.f32(1.0)
            })
            .collect();
        (q, Stored::new(&k, self.kv))
    }

    /// Every stage of the reference selection on the case's inputs.
    pub fn reference_selection(&self) -> reference::Selection {
        let (q, k) = self.inputs();
        reference::flashprefill_select(&self.shape, &q, &k.widened(), &self.params)
    }

    /// Rows of the lists whose decisions are within rounding of a boundary.
    pub fn undecided(&self, sel: &reference::Selection) -> Vec<bool> {
        let p = &self.params;
        let lists = &sel.lists;
        let mut out = Vec::new();
        for h in 0..self.shape.n_kv_heads {
            for i in 0..lists.n_qblocks {
                let qb = lists.qblock0 + i;
                let row = &sel.scores[(h * lists.n_qblocks + i) * lists.max_blocks..][..qb + 1];
                let best = row.iter().fold(0.0f64, |a, &b| a.max(b));
                let threshold = f64::from(p.alpha) * best;
                let near = |a: f64, b: f64| (a - b).abs() <= DECISIVE * a.abs().max(b.abs());
                let mut sorted = row.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                let budget_edge = p.min_budget > 0
                    && p.min_budget < sorted.len()
                    && near(sorted[p.min_budget - 1], sorted[p.min_budget]);
                let dense = i + p.last_full_blocks >= lists.n_qblocks;
                out.push(!dense && (budget_edge || row.iter().any(|&v| near(v, threshold))));
            }
        }
        out
    }

    /// The outputs of a selection: mean keys, scores, then the lists' blocks and counts.
    fn outputs(pooled: Vec<f32>, scores: Vec<f32>, lists: BlockLists) -> Vec<Out> {
        vec![
            Out::F32("pooled", pooled),
            Out::F32("scores", scores),
            Out::U32("blocks", lists.blocks),
            Out::U32("counts", lists.counts),
        ]
    }
}

impl Case for SelectCase {
    fn name(&self) -> String {
        format!(
            "flashprefill {:?} {:?} {:?} extra_rows={}",
            self.kv, self.shape, self.params, self.extra_rows
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (q, k) = self.inputs();
        let st = ops::flashprefill_stages(dev, &self.shape, &q, k.kv(), &self.params).unwrap();
        SelectCase::outputs(st.pooled, st.scores, st.lists)
    }

    fn reference(&self) -> Vec<Out> {
        let sel = self.reference_selection();
        let narrow = |x: &[f64]| x.iter().map(|&v| v as f32).collect();
        SelectCase::outputs(narrow(&sel.pooled), narrow(&sel.scores), sel.lists)
    }

    fn tolerance(&self) -> Tol {
        // Means of at most 128 rows summed in f32; scores are exp of f32 logits (|s| up to
        // ~20) whose rounding becomes a relative error of the score.
        Tol {
            abs: 1e-6,
            rel: 1e-4,
        }
    }

    /// Compares everything but the lists' undecided rows (by the reference's scores), which
    /// are blanked on both sides.
    fn compare(&self, got: &[Out], want: &[Out], tol: Tol) -> Result<(), String> {
        let sel = self.reference_selection();
        let undecided = self.undecided(&sel);
        let decided = |outs: &[Out]| -> Vec<Out> {
            outs.iter()
                .map(|out| match out {
                    Out::F32(name, x) => Out::F32(name, x.clone()),
                    Out::U32(name, x) => {
                        let width = if *name == "blocks" {
                            sel.lists.max_blocks
                        } else {
                            1
                        };
                        let mut x = x.clone();
                        for (r, _) in undecided.iter().enumerate().filter(|(_, &u)| u) {
                            if let Some(row) = x.get_mut(r * width..(r + 1) * width) {
                                row.fill(u32::MAX);
                            }
                        }
                        Out::U32(name, x)
                    }
                })
                .collect()
        };
        compare(&decided(got), &decided(want), tol)
    }
}

/// The selection's cases: GQA groups 1 to 4, every cache dtype, both block sizes, passes
/// that start inside a block, partial last blocks, forced blocks of every kind, one row, and
/// more key blocks than a workgroup has work-items.
pub fn select_cases() -> Vec<SelectCase> {
    use Dtype::{Bf16, F16, F32};
    // (cache dtype, [t, pos0, n_heads, n_kv_heads, head_dim],
    //  [block_size, sink, window, last_full, min_budget], alpha, extra cache rows)
    let table = [
        // GQA 1, small head_dim, t not a multiple of B.
        (Bf16, [300, 0, 4, 4, 16], [64, 0, 1, 0, 0], 0.3, 0),
        // GQA 2, pos0 not a multiple of B, a head_dim not a multiple of 4, min budget.
        (F16, [333, 100, 4, 2, 22], [64, 1, 2, 0, 3], 0.2, 5),
        // GQA 4, B = 128, pos0 a multiple of B, the published defaults.
        (F32, [1400, 256, 8, 2, 18], [128, 2, 4, 2, 0], 0.1, 0),
        // head_dim 256, the last block partial (t = 200, B = 128).
        (Bf16, [200, 0, 2, 1, 256], [128, 0, 1, 0, 0], 0.5, 0),
        (F32, [130, 1000, 4, 1, 256], [64, 0, 1, 1, 2], 0.25, 64),
        (F16, [257, 129, 2, 2, 256], [128, 1, 1, 0, 1], 0.3, 0),
        // One row.
        (Bf16, [1, 500, 4, 2, 32], [64, 0, 1, 0, 0], 0.2, 0),
        // More key blocks than a workgroup has work-items (several chunks per row).
        (F32, [4500, 0, 1, 1, 8], [64, 0, 1, 0, 0], 0.3, 0),
        (Bf16, [700, 4000, 2, 1, 8], [64, 0, 2, 0, 5], 0.15, 0),
    ];
    table
        .into_iter()
        .zip(1..)
        .map(
            |((kv, [t, pos0, h, kvh, d], blocks, alpha, extra_rows), seed)| {
                let [block_size, sink, window, last_full, min_budget] = blocks;
                SelectCase {
                    kv,
                    shape: shape(t, pos0, h, kvh, d),
                    params: FlashPrefillParams {
                        block_size,
                        alpha,
                        sink_blocks: sink,
                        window_blocks: window,
                        last_full_blocks: last_full,
                        min_budget,
                    },
                    extra_rows,
                    seed,
                }
            },
        )
        .collect()
}

/// [`select_cases`] for the harness.
pub fn cases() -> Vec<Box<dyn Case>> {
    boxed(select_cases())
}
