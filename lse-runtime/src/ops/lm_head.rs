//! The LM head kernels (`lm_head.matrix_bf16.v1`, `lm_head.matvec_bf16.v1`).

use half::bf16;
use lse_kernels::lm_head::{lm_head_matrix_bf16 as matrix, lm_head_matvec_bf16 as matvec};

use super::{check_len, to_u32, OpError};
use crate::device::{Arg, Device};

/// The head's weight, `[vocab, dim]`, in its stored dtype.
#[derive(Clone, Copy, Debug)]
pub enum HeadWeight<'a> {
    Bf16(&'a [bf16]),
}

impl HeadWeight<'_> {
    fn len(&self) -> usize {
        match self {
            HeadWeight::Bf16(w) => w.len(),
        }
    }
}

/// `out[r, v] = Σ_k hidden[r, k] · weight[v, k]` for `rows = hidden.len() / dim` rows; one row
/// uses the matrix-vector kernel (serving's shape), more use the matrix kernel (scoring's).
pub fn lm_head(dev: &Device, hidden: &[f32], dim: usize, weight: HeadWeight<'_>, vocab: usize, out: &mut [f32]) -> Result<(), OpError> {
    const OP: &str = "lm_head";
    if dim == 0 || vocab == 0 {
        return Err(OpError::Invalid { op: OP, message: format!("dim = {dim} and vocab = {vocab} must be positive") });
    }
    let rows = hidden.len() / dim;
    check_len(OP, "hidden", hidden.len(), rows * dim)?;
    check_len(OP, "weight", weight.len(), vocab * dim)?;
    check_len(OP, "out", out.len(), rows * vocab)?;
    to_u32(OP, "vocab * dim", vocab * dim)?;
    to_u32(OP, "rows * vocab", rows * vocab)?;
    let blocks = to_u32(OP, "vocab", vocab)?.div_ceil(256);
    let HeadWeight::Bf16(w) = weight;
    if rows == 1 {
        dev.launch(
            &matvec::KERNEL,
            [blocks, 1, 1],
            &[Arg::buf(hidden), Arg::buf(w), Arg::buf_mut(out), Arg::U32(vocab as u32), Arg::U32(dim as u32)],
        )?;
    } else if rows > 1 {
        let tiles = to_u32(OP, "rows", rows)?.div_ceil(4);
        dev.launch(
            &matrix::KERNEL,
            [blocks, tiles, 1],
            &[
                Arg::buf(hidden),
                Arg::buf(w),
                Arg::buf_mut(out),
                Arg::U32(rows as u32),
                Arg::U32(vocab as u32),
                Arg::U32(dim as u32),
            ],
        )?;
    }
    Ok(())
}
