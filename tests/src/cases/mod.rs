//! Every LOOM kernel's differential cases, in one place: the CPU differential tests run them
//! on generated Rust, LLVM host code and the plain-Rust references ([`crate::diff::run_cases`]);
//! the GPU test runs the same cases on the GPU against generated Rust.

use half::{bf16, f16};
use lse_runtime::ops::{AttnShape, HeadWeight, KvSlice};

use crate::diff::Case;

pub mod act_quant;
pub mod attention;
pub mod attention_layer;
pub mod deltanet;
pub mod ffn;
pub mod flashprefill;
pub mod gemm;
pub mod norm;
pub mod scoring;

/// Every case of every kernel.
pub fn all() -> Vec<Box<dyn Case>> {
    let mut out = scoring::cases();
    out.extend(attention::cases());
    out.extend(flashprefill::cases());
    out.extend(gemm::cases());
    out.extend(norm::cases());
    out.extend(attention_layer::cases());
    out.extend(ffn::cases());
    out.extend(deltanet::cases());
    out.extend(act_quant::cases());
    out
}

/// A pass of `t` rows from `pos0` with the scale `1 / sqrt(head_dim)`.
pub fn shape(
    t: usize,
    pos0: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> AttnShape {
    AttnShape {
        t,
        pos0,
        n_heads,
        n_kv_heads,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
    }
}

/// Cases of one type as the harness takes them.
pub fn boxed<C: Case + 'static>(cases: impl IntoIterator<Item = C>) -> Vec<Box<dyn Case>> {
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn Case>)
        .collect()
}

/// The stored dtype of a weight or a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    Bf16,
    F16,
    F32,
}

/// Values in their stored dtype (an LM-head weight, a cache's keys or values).
pub enum Stored {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Stored {
    /// `values` rounded to `dtype`.
    pub fn new(values: &[f32], dtype: Dtype) -> Stored {
        match dtype {
            Dtype::Bf16 => Stored::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            Dtype::F16 => Stored::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            Dtype::F32 => Stored::F32(values.to_vec()),
        }
    }

    /// The values as a cache slice.
    pub fn kv(&self) -> KvSlice<'_> {
        match self {
            Stored::Bf16(x) => KvSlice::Bf16(x.into()),
            Stored::F16(x) => KvSlice::F16(x.into()),
            Stored::F32(x) => KvSlice::F32(x.into()),
        }
    }

    /// The values as an LM-head weight.
    pub fn head(&self) -> HeadWeight<'_> {
        match self {
            Stored::Bf16(x) => HeadWeight::Bf16(x),
            Stored::F16(x) => HeadWeight::F16(x),
            Stored::F32(x) => HeadWeight::F32(x),
        }
    }

    /// The values widened to f32 with `half`, for the references.
    pub fn widened(&self) -> Vec<f32> {
        match self {
            Stored::Bf16(x) => x.iter().map(|v| v.to_f32()).collect(),
            Stored::F16(x) => x.iter().map(|v| v.to_f32()).collect(),
            Stored::F32(x) => x.clone(),
        }
    }
}
