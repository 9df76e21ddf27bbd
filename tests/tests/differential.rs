//! Differential cases of the scoring kernels (`lse_pick`, `topk_pairs`, the LM head) on the
//! shared harness [`lse_tests::diff`].

use half::{bf16, f16};
use lse_runtime::device::Device;
use lse_runtime::ops::{self, HeadWeight};
use lse_tests::diff::{run_cases, Case, Out, Rng, Tol, SAME_ORDER};

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

/// The stored dtype of an LM-head weight.
#[derive(Clone, Copy, Debug)]
enum HeadDType {
    Bf16,
    F16,
    F32,
}

/// An LM-head weight in its stored dtype.
enum Weights {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Weights {
    fn head(&self) -> HeadWeight<'_> {
        match self {
            Weights::Bf16(w) => HeadWeight::Bf16(w),
            Weights::F16(w) => HeadWeight::F16(w),
            Weights::F32(w) => HeadWeight::F32(w),
        }
    }

    /// The weight widened to f32 with `half`, for the reference.
    fn widened(&self) -> Vec<f32> {
        match self {
            Weights::Bf16(w) => w.iter().map(|x| x.to_f32()).collect(),
            Weights::F16(w) => w.iter().map(|x| x.to_f32()).collect(),
            Weights::F32(w) => w.clone(),
        }
    }
}

struct LmHeadCase {
    dtype: HeadDType,
    rows: usize,
    dim: usize,
    vocab: usize,
}

impl LmHeadCase {
    fn inputs(&self) -> (Vec<f32>, Weights) {
        let mut rng = Rng(99);
        let h = (0..self.rows * self.dim).map(|_| rng.f32(2.0)).collect();
        let w: Vec<f32> = (0..self.vocab * self.dim).map(|_| rng.f32(0.5)).collect();
        let w = match self.dtype {
            HeadDType::Bf16 => Weights::Bf16(w.iter().map(|&x| bf16::from_f32(x)).collect()),
            HeadDType::F16 => Weights::F16(w.iter().map(|&x| f16::from_f32(x)).collect()),
            HeadDType::F32 => Weights::F32(w),
        };
        (h, w)
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

fn cases() -> Vec<Box<dyn Case>> {
    vec![
        Box::new(LsePickCase {
            rows: 5,
            vocab: 1000,
            n_ids: 33,
            fill: Fill::Random,
        }),
        Box::new(LsePickCase {
            rows: 3,
            vocab: 77,
            n_ids: 3,
            fill: Fill::Ties,
        }),
        Box::new(LsePickCase {
            rows: 4,
            vocab: 300,
            n_ids: 5,
            fill: Fill::SomeNegInf,
        }),
        Box::new(LsePickCase {
            rows: 2,
            vocab: 129,
            n_ids: 2,
            fill: Fill::AllNegInf,
        }),
        Box::new(LsePickCase {
            rows: 2,
            vocab: 50,
            n_ids: 0,
            fill: Fill::Random,
        }),
        Box::new(LsePickCase {
            rows: 3,
            vocab: QWEN_VOCAB,
            n_ids: 33,
            fill: Fill::Random,
        }),
        Box::new(TopKCase {
            rows: 4,
            vocab: 1000,
            k: 32,
            fill: Fill::Random,
        }),
        Box::new(TopKCase {
            rows: 3,
            vocab: 513,
            k: 7,
            fill: Fill::Ties,
        }),
        Box::new(TopKCase {
            rows: 3,
            vocab: 300,
            k: 32,
            fill: Fill::SomeNegInf,
        }),
        Box::new(TopKCase {
            rows: 2,
            vocab: 40,
            k: 32,
            fill: Fill::AllNegInf,
        }),
        Box::new(TopKCase {
            rows: 2,
            vocab: 5,
            k: 5,
            fill: Fill::Random,
        }),
        Box::new(TopKCase {
            rows: 2,
            vocab: 1000,
            k: 1,
            fill: Fill::Random,
        }),
        Box::new(TopKCase {
            rows: 3,
            vocab: QWEN_VOCAB,
            k: 32,
            fill: Fill::Random,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::Bf16,
            rows: 1,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::Bf16,
            rows: 7,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::Bf16,
            rows: 128,
            dim: 32,
            vocab: 300,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::Bf16,
            rows: 2,
            dim: 8,
            vocab: QWEN_VOCAB,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F16,
            rows: 1,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F16,
            rows: 7,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F16,
            rows: 128,
            dim: 32,
            vocab: 300,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F16,
            rows: 2,
            dim: 8,
            vocab: QWEN_VOCAB,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F32,
            rows: 1,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F32,
            rows: 7,
            dim: 64,
            vocab: 1000,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F32,
            rows: 128,
            dim: 32,
            vocab: 300,
        }),
        Box::new(LmHeadCase {
            dtype: HeadDType::F32,
            rows: 2,
            dim: 8,
            vocab: QWEN_VOCAB,
        }),
    ]
}

#[test]
fn every_kernel_agrees_across_generated_rust_llvm_host_and_reference() {
    run_cases(cases());
}
