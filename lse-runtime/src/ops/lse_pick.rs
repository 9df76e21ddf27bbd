//! `logits.lse_pick.v1`.

use lse_kernels::lse_pick::lse_pick as kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, Device};

/// Per-row results of `lse_pick`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LsePick {
    /// `[rows, 2]`: the row maximum, then the sum of exp(logit - maximum).
    pub stats: Vec<f32>,
    /// `[rows, n_ids]`: the logits at the requested ids.
    pub picked: Vec<f32>,
}

/// Reduces each of `rows` rows of `logits` (`[rows, vocab]`) to its maximum, its sum of
/// exp(logit - maximum) and the logits at `ids` (`[rows, n_ids]`, each `< vocab`).
pub fn lse_pick(
    dev: &Device,
    logits: &[f32],
    vocab: usize,
    ids: &[u32],
    n_ids: usize,
) -> Result<LsePick, OpError> {
    run(dev, logits.into(), vocab, ids, n_ids)
}

/// [`lse_pick`] of logits in a device buffer (on a GPU they stay in device memory); the ids
/// go in and the per-row results come back, `rows * (2 + n_ids)` values.
pub fn lse_pick_dev(
    dev: &Device,
    logits: DevSlice<'_, f32>,
    vocab: usize,
    ids: &[u32],
    n_ids: usize,
) -> Result<LsePick, OpError> {
    run(dev, logits, vocab, ids, n_ids)
}

/// Checks `logits` (any placement) and `ids` against `vocab` and `n_ids`, then launches.
fn run(
    dev: &Device,
    logits: DevSlice<'_, f32>,
    vocab: usize,
    ids: &[u32],
    n_ids: usize,
) -> Result<LsePick, OpError> {
    const OP: &str = "logits.lse_pick.v1";
    if vocab == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: "vocab is 0".into(),
        });
    }
    let logits_len = logits.len();
    let rows = logits_len / vocab;
    check_len(OP, "logits", logits_len, rows * vocab)?;
    check_len(OP, "ids", ids.len(), rows * n_ids)?;
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("id {bad} is not below the vocabulary size {vocab}"),
        });
    }
    let mut out = LsePick {
        stats: vec![0.0; rows * 2],
        picked: vec![0.0; rows * n_ids],
    };
    let grid = [to_u32(OP, "rows", rows)?, 1, 1];
    let args = kernel::Args {
        logits,
        ids,
        stats: &mut out.stats,
        picked: &mut out.picked,
        vocab: to_u32(OP, "vocab", vocab)?,
        n_ids: to_u32(OP, "n_ids", n_ids)?,
    };
    dev.launch(grid, args)?;
    Ok(out)
}
