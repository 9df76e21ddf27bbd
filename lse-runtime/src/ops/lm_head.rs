//! The LM head kernels (`lm_head.matrix_<ty>.v1`, `lm_head.matvec_<ty>.v1` for ty = bf16, f16,
//! f32): one instance per weight dtype of the same LOOM source.

use half::{bf16, f16};
use lse_dsl::rt::KernelDef;
use lse_kernels::lm_head::{
    lm_head_matrix_bf16, lm_head_matrix_f16, lm_head_matrix_f32, lm_head_matvec_bf16,
    lm_head_matvec_f16, lm_head_matvec_f32,
};

use super::{check_len, to_u32, OpError};
use crate::device::{Arg, Device};

/// Rows per workgroup of `lm_head.matrix_*` (its `ROWS` constant).
const MATRIX_ROW_TILE: u32 = 16;

/// The head's weight, `[vocab, dim]`, in its stored dtype.
#[derive(Clone, Copy, Debug)]
pub enum HeadWeight<'a> {
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl<'a> HeadWeight<'a> {
    fn len(&self) -> usize {
        match self {
            HeadWeight::Bf16(w) => w.len(),
            HeadWeight::F16(w) => w.len(),
            HeadWeight::F32(w) => w.len(),
        }
    }

    /// The weight as a kernel argument.
    fn arg(self) -> Arg<'a> {
        match self {
            HeadWeight::Bf16(w) => Arg::buf(w),
            HeadWeight::F16(w) => Arg::buf(w),
            HeadWeight::F32(w) => Arg::buf(w),
        }
    }

    /// The matrix kernel (many rows) for this weight's dtype.
    pub fn matrix_kernel(&self) -> &'static KernelDef {
        match self {
            HeadWeight::Bf16(_) => &lm_head_matrix_bf16::KERNEL,
            HeadWeight::F16(_) => &lm_head_matrix_f16::KERNEL,
            HeadWeight::F32(_) => &lm_head_matrix_f32::KERNEL,
        }
    }

    /// The matrix-vector kernel (one row) for this weight's dtype.
    pub fn matvec_kernel(&self) -> &'static KernelDef {
        match self {
            HeadWeight::Bf16(_) => &lm_head_matvec_bf16::KERNEL,
            HeadWeight::F16(_) => &lm_head_matvec_f16::KERNEL,
            HeadWeight::F32(_) => &lm_head_matvec_f32::KERNEL,
        }
    }
}

/// `out[r, v] = Σ_k hidden[r, k] · weight[v, k]` for `rows = hidden.len() / dim` rows; one row
/// uses the matrix-vector kernel (serving's shape), more use the matrix kernel (scoring's).
pub fn lm_head(
    dev: &Device,
    hidden: &[f32],
    dim: usize,
    weight: HeadWeight<'_>,
    vocab: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "lm_head";
    if dim == 0 || vocab == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("dim = {dim} and vocab = {vocab} must be positive"),
        });
    }
    let rows = hidden.len() / dim;
    check_len(OP, "hidden", hidden.len(), rows * dim)?;
    check_len(OP, "weight", weight.len(), vocab * dim)?;
    check_len(OP, "out", out.len(), rows * vocab)?;
    to_u32(OP, "vocab * dim", vocab * dim)?;
    to_u32(OP, "rows * vocab", rows * vocab)?;
    let vocab32 = to_u32(OP, "vocab", vocab)?;
    if rows == 1 {
        let blocks = vocab32.div_ceil(weight.matvec_kernel().workgroup_size);
        dev.launch(
            weight.matvec_kernel(),
            [blocks, 1, 1],
            &[
                Arg::buf(hidden),
                weight.arg(),
                Arg::buf_mut(out),
                Arg::U32(vocab as u32),
                Arg::U32(dim as u32),
            ],
        )?;
    } else if rows > 1 {
        let blocks = vocab32.div_ceil(weight.matrix_kernel().workgroup_size);
        let tiles = to_u32(OP, "rows", rows)?.div_ceil(MATRIX_ROW_TILE);
        dev.launch(
            weight.matrix_kernel(),
            [blocks, tiles, 1],
            &[
                Arg::buf(hidden),
                weight.arg(),
                Arg::buf_mut(out),
                Arg::U32(rows as u32),
                Arg::U32(vocab as u32),
                Arg::U32(dim as u32),
            ],
        )?;
    }
    Ok(())
}
