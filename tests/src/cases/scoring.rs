//! Differential cases of the scoring kernels (`lse_pick`, `topk_pairs`, the LM head): random,
//! tied, partly and wholly -inf logit rows, Qwen3.5's vocabulary, every weight dtype.

use lse_runtime::device::Device;
use lse_runtime::ops;

use super::{Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol, SAME_ORDER};

/// How logit rows are filled.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Uniform random logits.
    Random,
    /// Few distinct values, so many ties.
    Ties,
    /// Random with a third of the entries -inf.
    SomeNegInf,
    /// Every entry -inf.
    AllNegInf,
}

fn logits(rows: usize, vocab: usize, fill: Fill, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..rows * vocab)
        .map(|_| match fill {
            Fill::Random => rng.f32(12.0),
            Fill::Ties => (rng.below(4) as f32) - 2.0,
            Fill::SomeNegInf if rng.below(3) == 0 => f32::NEG_INFINITY,
            Fill::SomeNegInf => rng.f32(12.0),
            Fill::AllNegInf => f32::NEG_INFINITY,
        })
        .collect()
}

struct LsePickCase {
    rows: usize,
    vocab: usize,
    n_ids: usize,
    fill: Fill,
}

impl LsePickCase {
    fn inputs(&self) -> (Vec<f32>, Vec<u32>) {
        let mut rng = Rng(7);
        // Repeated ids on purpose: every row asks for id 0 twice.
        let ids = (0..self.rows * self.n_ids)
            .map(|i| {
                if i % self.n_ids < 2 {
                    0
                } else {
                    rng.below(self.vocab) as u32
                }
            })
            .collect();
        (logits(self.rows, self.vocab, self.fill, 11), ids)
    }
}

impl Case for LsePickCase {
    fn name(&self) -> String {
        format!(
            "lse_pick rows={} vocab={} n_ids={} {:?}",
            self.rows, self.vocab, self.n_ids, self.fill
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (x, ids) = self.inputs();
        let r = ops::lse_pick(dev, &x, self.vocab, &ids, self.n_ids).unwrap();
        vec![Out::F32("stats", r.stats), Out::F32("picked", r.picked)]
    }

    fn reference(&self) -> Vec<Out> {
        let (x, ids) = self.inputs();
        let mut stats = Vec::new();
        let mut picked = Vec::new();
        for (r, row) in x.chunks(self.vocab).enumerate() {
            let row_ids = &ids[r * self.n_ids..(r + 1) * self.n_ids];
            let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let s: f64 = if m == f32::NEG_INFINITY {
                0.0
            } else {
                row.iter().map(|&v| f64::from(v - m).exp()).sum()
            };
            stats.extend([m, s as f32]);
            picked.extend(row_ids.iter().map(|&id| row[id as usize]));
        }
        vec![Out::F32("stats", stats), Out::F32("picked", picked)]
    }

    fn tolerance(&self) -> Tol {
        // The device sums 248k f32 terms in another order than this f64 reference.
        Tol {
            abs: 0.0,
            rel: 2e-5,
        }
    }
}

struct TopKCase {
    rows: usize,
    vocab: usize,
    k: usize,
    fill: Fill,
}

impl Case for TopKCase {
    fn name(&self) -> String {
        format!(
            "topk_pairs rows={} vocab={} k={} {:?}",
            self.rows, self.vocab, self.k, self.fill
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let x = logits(self.rows, self.vocab, self.fill, 23);
        let r = ops::topk_pairs(dev, &x, self.vocab, self.k).unwrap();
        vec![Out::U32("ids", r.ids), Out::F32("logits", r.logits)]
    }

    fn reference(&self) -> Vec<Out> {
        let x = logits(self.rows, self.vocab, self.fill, 23);
        let mut ids = Vec::new();
        let mut vals = Vec::new();
        for row in x.chunks(self.vocab) {
            let mut order: Vec<u32> = (0..self.vocab as u32).collect();
            // Larger first, ties to the lower id (a stable sort keeps id order).
            order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]));
            ids.extend(&order[..self.k]);
            vals.extend(order[..self.k].iter().map(|&i| row[i as usize]));
        }
        vec![Out::U32("ids", ids), Out::F32("logits", vals)]
    }

    fn tolerance(&self) -> Tol {
        SAME_ORDER
    }
}

struct LmHeadCase {
    dtype: Dtype,
    rows: usize,
    dim: usize,
    vocab: usize,
}

impl LmHeadCase {
    fn inputs(&self) -> (Vec<f32>, Stored) {
        let mut rng = Rng(99);
        let h = rng.f32s(self.rows * self.dim, 2.0);
        let w = rng.f32s(self.vocab * self.dim, 0.5);
        (h, Stored::new(&w, self.dtype))
    }
}

impl Case for LmHeadCase {
    fn name(&self) -> String {
        format!(
            "lm_head {:?} rows={} dim={} vocab={}",
            self.dtype, self.rows, self.dim, self.vocab
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (h, w) = self.inputs();
        let mut out = vec![0.0; self.rows * self.vocab];
        ops::lm_head(dev, &h, self.dim, w.head(), self.vocab, &mut out).unwrap();
        vec![Out::F32("logits", out)]
    }

    fn reference(&self) -> Vec<Out> {
        let (h, w) = self.inputs();
        let w = w.widened();
        let mut out = Vec::with_capacity(self.rows * self.vocab);
        for hr in h.chunks(self.dim) {
            for wr in w.chunks(self.dim) {
                let dot: f64 = hr
                    .iter()
                    .zip(wr)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                out.push(dot as f32);
            }
        }
        vec![Out::F32("logits", out)]
    }

    fn tolerance(&self) -> Tol {
        // f32 accumulation of `dim` products of magnitude <= 1 against an f64 reference.
        Tol {
            abs: 2e-6 * self.dim as f32,
            rel: 1e-5,
        }
    }
}

const QWEN_VOCAB: usize = 248_320;

/// The cases of `lse_pick`, `topk_pairs` and the LM head.
pub fn cases() -> Vec<Box<dyn Case>> {
    use Fill::*;
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    for (rows, vocab, n_ids, fill) in [
        (5, 1000, 33, Random),
        (3, 77, 3, Ties),
        (4, 300, 5, SomeNegInf),
        (2, 129, 2, AllNegInf),
        (2, 50, 0, Random),
        // Blocks of 16 chunks of 256: a last block of one logit, and three blocks, the last
        // partial in its last chunk.
        (1, 4096 + 1, 2, Random),
        (2, 2 * 4096 + 7, 4, SomeNegInf),
        (3, QWEN_VOCAB, 33, Random),
    ] {
        out.push(Box::new(LsePickCase {
            rows,
            vocab,
            n_ids,
            fill,
        }));
    }
    for (rows, vocab, k, fill) in [
        (4, 1000, 32, Random),
        (3, 513, 7, Ties),
        (3, 300, 32, SomeNegInf),
        (2, 40, 32, AllNegInf),
        (2, 5, 5, Random),
        (2, 1000, 1, Random),
        (3, QWEN_VOCAB, 32, Random),
        // Several of the kernel's blocks, so its threshold is refreshed and used: ties at the
        // threshold across blocks, and -inf entries.
        (2, 40_000, 32, Ties),
        (2, 40_000, 3, SomeNegInf),
    ] {
        out.push(Box::new(TopKCase {
            rows,
            vocab,
            k,
            fill,
        }));
    }
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        for (rows, dim, vocab) in [
            (1, 64, 1000),
            (7, 64, 1000),
            (128, 32, 300),
            (2, 8, QWEN_VOCAB),
        ] {
            out.push(Box::new(LmHeadCase {
                dtype,
                rows,
                dim,
                vocab,
            }));
        }
    }
    out
}
