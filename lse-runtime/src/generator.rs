//! Prefill planning with llama.cpp's batch / ubatch meaning, and running a prompt through a
//! model in those passes.
//!
//! `batch_size` (n_batch) is the logical maximum number of tokens per decode call; the prompt
//! is cut into batch-sized pieces. `ubatch_size` (n_ubatch) is the physical maximum per compute
//! pass; each batch piece is cut into ubatch-sized passes. As in llama.cpp, an ubatch larger
//! than the batch is clamped to the batch.

use std::ops::Range;

use crate::device::DevSlice;
use crate::model::{DType, HybridLM, ModelError, PrefillAttention, Result, Session};

/// Runs prompts through a model pass by pass, carrying one session.
pub struct Generator<'m> {
    model: &'m HybridLM,
    attn: &'m PrefillAttention<'m>,
    session: Session,
}

impl<'m> Generator<'m> {
    /// A generator with a fresh session (KV cache of `kv_len` tokens in `kv_dtype`) whose
    /// full-attention layers run their attention through `attn`.
    pub fn new(
        model: &'m HybridLM,
        attn: &'m PrefillAttention<'m>,
        kv_dtype: DType,
        kv_len: usize,
    ) -> Result<Self> {
        Ok(Generator {
            model,
            attn,
            session: model.new_session(kv_dtype, kv_len)?,
        })
    }

    /// The pass plan for a prompt: token ranges, in order, covering `0..prompt_len`.
    pub fn prefill_passes(
        prompt_len: usize,
        batch_size: usize,
        ubatch_size: usize,
    ) -> Result<Vec<Range<usize>>> {
        if batch_size == 0 {
            return Err(ModelError::InvalidArgument(
                "batch_size must be at least 1".into(),
            ));
        }
        if ubatch_size == 0 {
            return Err(ModelError::InvalidArgument(
                "ubatch_size must be at least 1".into(),
            ));
        }
        let ub = ubatch_size.min(batch_size);
        let mut out = Vec::new();
        let mut b0 = 0;
        while b0 < prompt_len {
            let b1 = b0.saturating_add(batch_size).min(prompt_len);
            let mut u0 = b0;
            while u0 < b1 {
                let u1 = u0.saturating_add(ub).min(b1);
                out.push(u0..u1);
                u0 = u1;
            }
            b0 = b1;
        }
        Ok(out)
    }

    /// Prefills `tokens` in the planned passes and returns all final hidden rows [T, H].
    ///
    /// Fails before any work if the prompt does not fit in the remaining KV capacity.
    pub fn prefill(
        &mut self,
        tokens: &[u32],
        batch_size: usize,
        ubatch_size: usize,
    ) -> Result<Vec<f32>> {
        let plan = Self::prefill_passes(tokens.len(), batch_size, ubatch_size)?;
        self.session.check_fits(tokens.len())?;
        let mut out = Vec::with_capacity(tokens.len() * self.model.config().hidden_size);
        for r in plan {
            out.extend(
                self.model
                    .hidden(&mut self.session, &tokens[r], self.attn)?,
            );
        }
        Ok(out)
    }

    /// Scores a prompt the way serving prefills it: runs `tokens` through the pass plan and,
    /// after each pass, hands the final hidden rows of the positions in `rows` that the pass
    /// produced to `head`, at most `head_rows` rows at a time, as `(hidden [n, H], positions)`,
    /// the rows where the pass left them (on a GPU, in its memory).
    ///
    /// Fails before any work if the prompt does not fit in the remaining KV capacity.
    pub fn score<E: From<ModelError>>(
        &mut self,
        tokens: &[u32],
        rows: Range<usize>,
        batch_size: usize,
        ubatch_size: usize,
        head_rows: usize,
        mut head: impl FnMut(DevSlice<'_, f32>, Range<usize>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let plan = Self::prefill_passes(tokens.len(), batch_size, ubatch_size)?;
        self.session.check_fits(tokens.len())?;
        let dim = self.model.config().hidden_size;
        for pass in plan {
            // The pass's rows before its first scored one (all of them when it scores none)
            // are not computed past the last layer's mixer.
            let (lo, hi) = (pass.start.max(rows.start), pass.end.min(rows.end));
            let from = if lo < hi { lo - pass.start } else { pass.len() };
            let hidden = self.model.hidden_rows_on_device(
                &mut self.session,
                &tokens[pass.clone()],
                self.attn,
                from,
            )?;
            let mut b = lo;
            while b < hi {
                let e = (b + head_rows.max(1)).min(hi);
                let block = hidden
                    .slice((b - lo) * dim..(e - lo) * dim)
                    .map_err(ModelError::from)?;
                head(block, b..e)?;
                b = e;
            }
        }
        Ok(())
    }

    /// The session (position, caches).
    pub fn session(&self) -> &Session {
        &self.session
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_llama_cpp_batch_then_ubatch() {
        let p = Generator::prefill_passes(10, 4, 3).unwrap();
        assert_eq!(p, vec![0..3, 3..4, 4..7, 7..8, 8..10]);
        // ubatch > batch is clamped to batch.
        assert_eq!(
            Generator::prefill_passes(5, 2, 8).unwrap(),
            vec![0..2, 2..4, 4..5]
        );
        assert_eq!(Generator::prefill_passes(5, 8, 8).unwrap(), vec![0..5]);
        assert!(Generator::prefill_passes(0, 8, 8).unwrap().is_empty());
    }

    #[test]
    fn zero_sizes_are_errors() {
        let e = Generator::prefill_passes(5, 0, 1).unwrap_err().to_string();
        assert!(e.contains("batch_size"), "{e}");
        let e = Generator::prefill_passes(5, 1, 0).unwrap_err().to_string();
        assert!(e.contains("ubatch_size"), "{e}");
    }

    #[test]
    fn plans_cover_the_prompt_exactly() {
        for len in 0..40 {
            for b in 1..9 {
                for u in 1..9 {
                    let p = Generator::prefill_passes(len, b, u).unwrap();
                    let mut next = 0;
                    for r in &p {
                        assert_eq!(r.start, next);
                        assert!(!r.is_empty() && r.len() <= u.min(b));
                        // No pass straddles a batch boundary.
                        assert_eq!(r.start / b, (r.end - 1) / b);
                        next = r.end;
                    }
                    assert_eq!(next, len);
                }
            }
        }
    }
}
