//! The scoring head: after each prefill pass, the LM head and the two reductions run on the
//! device over the pass's scored rows, `HEAD_ROWS` at a time, and only per-row scalars and
//! top-k pairs come back. The head weight is the model's, on the device since load; each
//! block's hidden rows are read where the pass left them, its logits stay in a device buffer
//! that the reductions read where it is (nothing vocabulary-sized per row crosses to the host
//! on a GPU). The host forms log-probabilities in f64.

use super::EngineError;
use crate::device::{DevSlice, Device, DeviceBuf};
use crate::ops::{self, Activations, OpError, WeightView};
use crate::scoring::{
    base_record, compare_row, BaseRecord, DeviceRow, KldAccumulator, KldBaseReader, KldBaseWriter,
    PplAccumulator,
};

/// Rows the LM head processes per launch (`config.head_rows`).
pub const HEAD_ROWS: usize = 128;

/// What the run does with KL divergence.
pub enum KldMode {
    /// Perplexity only.
    Off,
    /// Record a base: each scored token's NLL and its top-k (id, log-prob) pairs.
    Record { writer: KldBaseWriter, top_k: usize },
    /// Compare with a recorded base.
    Compare {
        reader: KldBaseReader,
        top_k: usize,
        acc: KldAccumulator,
    },
}

/// The head weight on the device and the reused buffers of the head stage.
pub struct HeadStage<'a> {
    dev: &'a Device,
    weight: WeightView<'a>,
    /// How the hidden rows meet the weight (the model's [`crate::model::HybridLM::head_act`]).
    act: Activations,
    vocab: usize,
    dim: usize,
    /// A device buffer, grown to the largest block so far: `[rows, vocab]`.
    logits: DeviceBuf<f32>,
    ids: Vec<u32>,
    picked: Vec<f32>,
    base: Vec<BaseRecord>,
}

impl<'a> HeadStage<'a> {
    /// The head of `weight` (`[vocab, dim]`, in `dev`'s memory or host memory) on `dev`, the
    /// hidden rows meeting it as `act` says.
    pub fn new(
        dev: &'a Device,
        weight: WeightView<'a>,
        act: Activations,
        vocab: usize,
        dim: usize,
    ) -> Result<HeadStage<'a>, EngineError> {
        Ok(HeadStage {
            dev,
            weight,
            act,
            vocab,
            dim,
            logits: dev.alloc(0).map_err(OpError::from)?,
            ids: Vec::new(),
            picked: Vec::new(),
            base: Vec::new(),
        })
    }

    /// Grows `buf` to at least `len` elements (its contents are rewritten before every use).
    fn reserve(dev: &Device, buf: &mut DeviceBuf<f32>, len: usize) -> Result<(), OpError> {
        if buf.len() < len {
            *buf = dev.alloc(len)?;
        }
        Ok(())
    }

    /// Scores up to [`HEAD_ROWS`] rows: `hidden` is `[n, dim]`, `targets` the `n` tokens the
    /// rows predict. Adds each NLL to `acc` (and appends it to `token_nlls` when given) and
    /// records or compares per `mode`.
    pub fn score_block(
        &mut self,
        hidden: DevSlice<'_, f32>,
        targets: &[u32],
        mode: &mut KldMode,
        acc: &mut PplAccumulator,
        mut token_nlls: Option<&mut Vec<f32>>,
    ) -> Result<(), EngineError> {
        let n = targets.len();
        debug_assert!(n <= HEAD_ROWS && hidden.len() == n * self.dim);
        let v = self.vocab;
        Self::reserve(self.dev, &mut self.logits, n * v)?;
        ops::lm_head_dev_act(
            self.dev,
            hidden,
            self.dim,
            self.weight,
            v,
            self.logits.slice_mut(..n * v).map_err(OpError::from)?,
            self.act,
        )?;
        let logits = self.logits.slice(..n * v).map_err(OpError::from)?;

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
                let rec = reader
                    .next_record()?
                    .ok_or_else(|| EngineError::BaseEnded(reader.path().display().to_string()))?;
                self.ids.extend(&rec.ids);
                self.base.push(rec);
            }
        }
        let pick = ops::lse_pick_dev(self.dev, logits, v, &self.ids, per_row)?;
        let top = match mode {
            KldMode::Off => None,
            KldMode::Record { top_k, .. } => {
                Some(ops::topk_pairs_dev(self.dev, logits, v, *top_k)?)
            }
            KldMode::Compare { .. } => Some(ops::topk_pairs_dev(self.dev, logits, v, 1)?),
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
            let nll = match mode {
                KldMode::Off => {
                    crate::scoring::stats::row_nll(row.max_logit, row.sum_exp, row.target_logit)?
                }
                KldMode::Record { writer, top_k } => {
                    let top = top.as_ref().expect("top-k runs when recording");
                    self.picked.clear();
                    self.picked
                        .extend_from_slice(&top.logits[r * *top_k..(r + 1) * *top_k]);
                    row.picked_logits = &self.picked;
                    let rec = base_record(&row, &top.ids[r * *top_k..(r + 1) * *top_k])?;
                    writer.write(&rec)?;
                    rec.nll
                }
                KldMode::Compare { acc: kacc, .. } => {
                    row.argmax = top.as_ref().expect("argmax runs when comparing").ids[r];
                    let cmp = compare_row(&row, &self.base[r])?;
                    kacc.add(&cmp);
                    cmp.nll
                }
            };
            acc.add(nll);
            if let Some(v) = token_nlls.as_deref_mut() {
                v.push(nll as f32);
            }
        }
        Ok(())
    }
}
