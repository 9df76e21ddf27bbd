//! The projections of prefill: `Y = X · Wᵀ` with W in its stored dtype, through the LOOM
//! GEMM (`kernels-src/src/gemm.rs`) on the engine's device ([`linear`]).

use std::borrow::Cow;

use half::{bf16, f16};

use super::weights::{DType, Tensor};
use crate::device::Device;
use crate::ops::{self, Activations, GemmOut, HeadWeight, OpError};

/// A row-major weight matrix [n, k] inside a tensor, in its stored dtype.
#[derive(Clone, Copy)]
pub struct WeightMat<'a> {
    bytes: &'a [u8],
    dtype: DType,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
}

impl<'a> WeightMat<'a> {
    /// The whole 2-D tensor [n, k].
    pub fn of(t: &'a Tensor) -> Self {
        // Shapes are checked against config.json, whose sizes are at least 1.
        let k = t.shape.last().copied().unwrap_or(1).max(1);
        Self::rows(t, 0, t.numel() / k, k)
    }
    /// Rows `[row0, row0 + n)` of the tensor viewed as a flat matrix with `k` columns
    /// (used for one expert's slice of a fused 3-D expert tensor).
    pub fn rows(t: &'a Tensor, row0: usize, n: usize, k: usize) -> Self {
        let s = t.dtype.size();
        WeightMat {
            bytes: &t.bytes()[row0 * k * s..(row0 + n) * k * s],
            dtype: t.dtype,
            n,
            k,
        }
    }
}

/// The weight as a kernel takes it: a typed view of the tensor's bytes, or a copy when the
/// bytes are not aligned for the element type (safetensors does not promise it).
pub enum Typed<'a> {
    Bf16(Cow<'a, [bf16]>),
    F16(Cow<'a, [f16]>),
    F32(Cow<'a, [f32]>),
}

fn typed<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

impl Typed<'_> {
    /// The weight as the ops take it.
    pub fn weight(&self) -> HeadWeight<'_> {
        match self {
            Typed::Bf16(v) => HeadWeight::Bf16(v),
            Typed::F16(v) => HeadWeight::F16(v),
            Typed::F32(v) => HeadWeight::F32(v),
        }
    }
}

impl<'a> WeightMat<'a> {
    /// The matrix in its stored dtype, typed.
    pub fn typed(&self) -> Typed<'a> {
        match self.dtype {
            DType::BF16 => Typed::Bf16(typed(self.bytes)),
            DType::F16 => Typed::F16(typed(self.bytes)),
            DType::F32 => Typed::F32(typed(self.bytes)),
        }
    }
}

/// `out[t, :] = x[t, :] · Wᵀ` for `t` rows through the LOOM GEMM on `dev`. `x` is [t, w.k],
/// `out` is [t, w.n] (overwritten). Activations stay f32 (f32 products, as the transformers
/// goldens compute them): rounding them to bf16 moves perplexity (README, "Numerics of the
/// GEMM").
pub fn linear(
    dev: &Device,
    x: &[f32],
    t: usize,
    w: WeightMat<'_>,
    out: &mut [f32],
) -> Result<(), OpError> {
    let (x, out) = (&x[..t * w.k], &mut out[..t * w.n]);
    ops::gemm(
        dev,
        x,
        w.k,
        w.typed().weight(),
        w.n,
        out,
        GemmOut::Overwrite,
        Activations::F32,
    )
}
