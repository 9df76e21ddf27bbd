//! `topk_pairs.v1`.

use lse_kernels::topk_pairs::topk_pairs as kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, Device};

/// The largest k the kernel supports.
pub const MAX_TOP_K: usize = 32;

/// Per-row top-k, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopK {
    /// `[rows, k]`.
    pub ids: Vec<u32>,
    /// `[rows, k]`.
    pub logits: Vec<f32>,
}

/// The `k` largest (id, logit) pairs of each row of `logits` (`[rows, vocab]`), ties to the
/// lower id; `k` in `1..=32` and at most `vocab`.
pub fn topk_pairs(dev: &Device, logits: &[f32], vocab: usize, k: usize) -> Result<TopK, OpError> {
    run(dev, logits.into(), vocab, k)
}

/// [`topk_pairs`] of logits in a device buffer (on a GPU they stay in device memory); only
/// the `rows * k` pairs come back.
pub fn topk_pairs_dev(
    dev: &Device,
    logits: DevSlice<'_, f32>,
    vocab: usize,
    k: usize,
) -> Result<TopK, OpError> {
    run(dev, logits, vocab, k)
}

/// Checks `k` and `logits` (any placement) against `vocab`, then launches.
fn run(dev: &Device, logits: DevSlice<'_, f32>, vocab: usize, k: usize) -> Result<TopK, OpError> {
    const OP: &str = "topk_pairs.v1";
    if !(1..=MAX_TOP_K).contains(&k) || k > vocab {
        return Err(OpError::Invalid {
            op: OP,
            message: format!(
                "k = {k} must be in 1..={MAX_TOP_K} and at most the vocabulary size {vocab}"
            ),
        });
    }
    let logits_len = logits.len();
    let rows = logits_len / vocab;
    check_len(OP, "logits", logits_len, rows * vocab)?;
    let mut out = TopK {
        ids: vec![0; rows * k],
        logits: vec![0.0; rows * k],
    };
    let grid = [to_u32(OP, "rows", rows)?, 1, 1];
    let args = kernel::Args {
        logits,
        out_ids: &mut out.ids,
        out_vals: &mut out.logits,
        vocab: to_u32(OP, "vocab", vocab)?,
        k: k as u32,
    };
    dev.launch(grid, args)?;
    Ok(out)
}
