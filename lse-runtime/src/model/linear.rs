//! The projections of prefill: `Y = X · Wᵀ` with W in its stored dtype, through the LOOM
//! GEMM (`kernels-src/src/gemm.rs`) on the engine's device ([`linear`]).

use super::device_weights::DeviceWeight;
use super::error::Result;
use crate::device::{DevSlice, DevSliceMut, Device};
use crate::ops::{self, Activations, GemmJob, GemmOut, WeightView};

/// A row-major weight matrix [n, k] inside a device weight, in its stored dtype.
#[derive(Clone, Copy)]
pub struct WeightMat<'a> {
    view: WeightView<'a>,
    act: Activations,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
}

impl<'a> WeightMat<'a> {
    /// The whole 2-D weight [n, k].
    pub fn of(w: &'a DeviceWeight) -> Self {
        WeightMat {
            view: w.view(),
            act: w.act,
            n: w.rows,
            k: w.cols,
        }
    }

    /// Rows `[row0, row0 + n)` of the weight viewed as a flat matrix with `k` columns (one
    /// expert's slice of a fused 3-D expert tensor).
    pub fn rows(w: &'a DeviceWeight, row0: usize, n: usize, k: usize) -> Result<Self> {
        Ok(WeightMat {
            view: w.view().sub(row0 * k..(row0 + n) * k)?,
            act: w.act,
            n,
            k,
        })
    }
}

/// `out[t, :] = x[t, :] · Wᵀ` for `t` rows through the LOOM GEMM on `dev`. `x` is [t, w.k],
/// `out` is [t, w.n] (overwritten). Activations meet the weight as the checkpoint's reference
/// computes it: f32 for a Hugging Face checkpoint (f32 products, as the transformers goldens
/// compute them; rounding them to bf16 moves perplexity, README "Numerics of the GEMM"),
/// llama.cpp's rounding or quantization for a GGUF's.
pub fn linear(
    dev: &Device,
    x: DevSlice<'_, f32>,
    w: WeightMat<'_>,
    out: DevSliceMut<'_, f32>,
) -> Result<()> {
    ops::gemm(dev, x, w.k, w.view, w.n, out, GemmOut::Overwrite, w.act)?;
    Ok(())
}

/// [`linear`] of one `x` by several weights (q, k and v; gate and up): the same results, with
/// `x` quantized once for all the weights that take the integer GEMM and transposed once for
/// all the 16-bit ones that take `gemm.xwt` ([`ops::gemm_same_x`]).
pub fn linear_same_x<'a>(
    dev: &Device,
    x: DevSlice<'a, f32>,
    products: Vec<(WeightMat<'a>, DevSliceMut<'a, f32>)>,
) -> Result<()> {
    // A weight of other columns than the first fails `gemm_same_x`'s shape check.
    let Some(k) = products.first().map(|(w, _)| w.k) else {
        return Ok(());
    };
    let jobs = products
        .into_iter()
        .map(|(w, y)| GemmJob {
            w: w.view,
            n: w.n,
            y,
            out: GemmOut::Overwrite,
            act: w.act,
        })
        .collect();
    ops::gemm_same_x(dev, x, k, jobs)?;
    Ok(())
}
