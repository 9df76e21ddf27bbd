//! The scoring head: after each prefill pass, the LM head and the two reductions run on the
//! device over the pass's scored rows, `HEAD_ROWS` at a time, and only per-row scalars and
//! top-k pairs come back. The head weight is made resident on the device once per run; each
//! block's hidden rows go in, its logits stay in a device buffer that the reductions read
//! where it is (nothing vocabulary-sized per row crosses to the host on a GPU). The host
//! forms log-probabilities in f64.

use half::{bf16, f16};

use super::EngineError;
use crate::device::{Device, DeviceBuf};
use crate::model::{DType, LmHeadView};
use crate::ops::{self, HeadWeight, OpError, ResidentHeadWeight};
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

/// The head weight as the kernels take it: the stored bytes viewed as bf16, f16 or f32.
pub fn head_weight<'a>(view: &LmHeadView<'a>) -> Result<HeadWeight<'a>, EngineError> {
    let misaligned = |size: usize| {
        move |e: bytemuck::PodCastError| {
            EngineError::Unsupported(format!(
                "the LM-head weight is not {size}-byte aligned in its file ({e})"
            ))
        }
    };
    match view.dtype {
        DType::BF16 => bytemuck::try_cast_slice::<u8, bf16>(view.bytes)
            .map(HeadWeight::Bf16)
            .map_err(misaligned(2)),
        DType::F16 => bytemuck::try_cast_slice::<u8, f16>(view.bytes)
            .map(HeadWeight::F16)
            .map_err(misaligned(2)),
        DType::F32 => bytemuck::try_cast_slice::<u8, f32>(view.bytes)
            .map(HeadWeight::F32)
            .map_err(misaligned(4)),
    }
}

/// The head weight on the device and the reused buffers of the head stage.
pub struct HeadStage<'a> {
    dev: &'a Device,
    weight: ResidentHeadWeight<'a>,
    vocab: usize,
    dim: usize,
    /// Device buffers, grown to the largest block so far: `[rows, dim]` and `[rows, vocab]`.
    hidden: DeviceBuf<f32>,
    logits: DeviceBuf<f32>,
    ids: Vec<u32>,
    picked: Vec<f32>,
    base: Vec<BaseRecord>,
}

impl<'a> HeadStage<'a> {
    /// Makes `weight` (`[vocab, dim]`) resident on `dev`: on a GPU it is uploaded here, once.
    pub fn new(
        dev: &'a Device,
        weight: HeadWeight<'a>,
        vocab: usize,
        dim: usize,
    ) -> Result<HeadStage<'a>, EngineError> {
        Ok(HeadStage {
            dev,
            weight: weight.resident(dev)?,
            vocab,
            dim,
            hidden: dev.alloc(0).map_err(OpError::from)?,
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
        hidden: &[f32],
        targets: &[u32],
        mode: &mut KldMode,
        acc: &mut PplAccumulator,
        mut token_nlls: Option<&mut Vec<f32>>,
    ) -> Result<(), EngineError> {
        let n = targets.len();
        debug_assert!(n <= HEAD_ROWS && hidden.len() == n * self.dim);
        let v = self.vocab;
        Self::reserve(self.dev, &mut self.hidden, hidden.len())?;
        Self::reserve(self.dev, &mut self.logits, n * v)?;
        self.hidden.upload(hidden).map_err(OpError::from)?;
        ops::lm_head_dev(
            self.dev,
            self.hidden.slice(..hidden.len()).map_err(OpError::from)?,
            self.dim,
            &self.weight,
            v,
            self.logits.slice_mut(..n * v).map_err(OpError::from)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, bytes: &[u8]) -> LmHeadView<'_> {
        LmHeadView {
            dtype,
            vocab: 2,
            hidden: 1,
            bytes,
        }
    }

    #[test]
    fn each_dtype_views_its_bytes_as_that_type() {
        // f32 alignment covers the 2-byte types too.
        let words = [1.5f32, -2.0];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        let Ok(HeadWeight::F32(w)) = head_weight(&view(DType::F32, bytes)) else {
            panic!("f32 head")
        };
        assert_eq!(w, &words);
        let Ok(HeadWeight::F16(w)) = head_weight(&view(DType::F16, &bytes[..4])) else {
            panic!("f16 head")
        };
        assert_eq!(
            w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [0u16, 0x3fc0]
        );
        let Ok(HeadWeight::Bf16(w)) = head_weight(&view(DType::BF16, &bytes[4..])) else {
            panic!("bf16 head")
        };
        assert_eq!(
            w.iter().map(|x| x.to_f32()).collect::<Vec<_>>(),
            [0.0, -2.0]
        );
    }

    #[test]
    fn misaligned_weights_are_refused_with_the_alignment() {
        let words = [0u32; 4];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        let err = |r: Result<HeadWeight<'_>, EngineError>| match r {
            Err(e) => e.to_string(),
            Ok(w) => panic!("expected an error, got {w:?}"),
        };
        let e = err(head_weight(&view(DType::F32, &bytes[2..10])));
        assert!(e.contains("not 4-byte aligned"), "{e}");
        let e = err(head_weight(&view(DType::F16, &bytes[1..5])));
        assert!(e.contains("not 2-byte aligned"), "{e}");
    }
}
