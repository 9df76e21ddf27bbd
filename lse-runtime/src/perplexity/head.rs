//! The scoring head: after each prefill pass, the LM head and the two reductions run on the
//! device over the pass's scored rows, `HEAD_ROWS` at a time, and only per-row scalars and
//! top-k pairs come back. The host forms log-probabilities in f64.

use half::bf16;

use super::EngineError;
use crate::device::Device;
use crate::model::{DType, LmHeadView};
use crate::ops::{self, HeadWeight};
use crate::scoring::{base_record, compare_row, BaseRecord, DeviceRow, KldAccumulator, KldBaseReader, KldBaseWriter, PplAccumulator};

/// Rows the LM head processes per launch (`config.head_rows`).
pub const HEAD_ROWS: usize = 128;

/// What the run does with KL divergence.
pub enum KldMode {
    /// Perplexity only.
    Off,
    /// Record a base: each scored token's NLL and its top-k (id, log-prob) pairs.
    Record { writer: KldBaseWriter, top_k: usize },
    /// Compare with a recorded base.
    Compare { reader: KldBaseReader, top_k: usize, acc: KldAccumulator },
}

/// The head weight as the kernels take it.
pub fn head_weight<'a>(view: &LmHeadView<'a>) -> Result<HeadWeight<'a>, EngineError> {
    match view.dtype {
        DType::BF16 => bytemuck::try_cast_slice::<u8, bf16>(view.bytes)
            .map(HeadWeight::Bf16)
            .map_err(|e| EngineError::Unsupported(format!("the LM-head weight is not 2-byte aligned in its file ({e})"))),
        other => Err(EngineError::Unsupported(format!(
            "the LM head is stored as {other:?}; LOOM has an LM-head kernel for bf16 weights only so far"
        ))),
    }
}

/// Reused buffers of the head stage.
pub struct HeadStage<'a> {
    dev: &'a Device,
    weight: HeadWeight<'a>,
    vocab: usize,
    dim: usize,
    logits: Vec<f32>,
    ids: Vec<u32>,
    picked: Vec<f32>,
    base: Vec<BaseRecord>,
}

impl<'a> HeadStage<'a> {
    pub fn new(dev: &'a Device, weight: HeadWeight<'a>, vocab: usize, dim: usize) -> HeadStage<'a> {
        HeadStage { dev, weight, vocab, dim, logits: Vec::new(), ids: Vec::new(), picked: Vec::new(), base: Vec::new() }
    }

    /// Scores up to [`HEAD_ROWS`] rows: `hidden` is `[n, dim]`, `targets` the `n` tokens the
    /// rows predict. Adds each NLL to `acc` and records or compares per `mode`.
    pub fn score_block(&mut self, hidden: &[f32], targets: &[u32], mode: &mut KldMode, acc: &mut PplAccumulator) -> Result<(), EngineError> {
        let n = targets.len();
        debug_assert!(n <= HEAD_ROWS && hidden.len() == n * self.dim);
        let v = self.vocab;
        self.logits.resize(n * v, 0.0);
        ops::lm_head(self.dev, hidden, self.dim, self.weight, v, &mut self.logits)?;

        // The ids each row's logits are picked at: the target, then a base's top-k.
        let per_row = match mode {
            KldMode::Compare { top_k, .. } => 1 + *top_k,
            _ => 1,
        };
        self.ids.clear();
        self.base.clear();
        for &t in targets {
            self.ids.push(t);
            if let KldMode::Compare { reader, .. } = mode {
                let rec = reader.next_record()?.ok_or_else(|| EngineError::BaseEnded(reader.path().display().to_string()))?;
                self.ids.extend(&rec.ids);
                self.base.push(rec);
            }
        }
        let pick = ops::lse_pick(self.dev, &self.logits, v, &self.ids, per_row)?;
        let top = match mode {
            KldMode::Off => None,
            KldMode::Record { top_k, .. } => Some(ops::topk_pairs(self.dev, &self.logits, v, *top_k)?),
            KldMode::Compare { .. } => Some(ops::topk_pairs(self.dev, &self.logits, v, 1)?),
        };

        for r in 0..n {
            let stats = &pick.stats[r * 2..r * 2 + 2];
            let picked = &pick.picked[r * per_row..(r + 1) * per_row];
            let mut row = DeviceRow {
                max_logit: f64::from(stats[0]),
                sum_exp: f64::from(stats[1]),
                target_logit: f64::from(picked[0]),
                picked_logits: &picked[1..],
                argmax: 0,
            };
            match mode {
                KldMode::Off => acc.add(crate::scoring::stats::row_nll(row.max_logit, row.sum_exp, row.target_logit)?),
                KldMode::Record { writer, top_k } => {
                    let top = top.as_ref().expect("top-k runs when recording");
                    self.picked.clear();
                    self.picked.extend_from_slice(&top.logits[r * *top_k..(r + 1) * *top_k]);
                    row.picked_logits = &self.picked;
                    let rec = base_record(&row, &top.ids[r * *top_k..(r + 1) * *top_k])?;
                    writer.write(&rec)?;
                    acc.add(rec.nll);
                }
                KldMode::Compare { acc: kacc, .. } => {
                    row.argmax = top.as_ref().expect("argmax runs when comparing").ids[r];
                    let cmp = compare_row(&row, &self.base[r])?;
                    kacc.add(&cmp);
                    acc.add(cmp.nll);
                }
            }
        }
        Ok(())
    }
}
