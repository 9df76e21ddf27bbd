//! Typed, shape-checked entry points for the LOOM kernels: the forward pass's and the
//! scoring head's.
//!
//! Each op checks its operands against the shapes it is given, then launches the LOOM kernel
//! on the device through the kernel's typed launcher (its generated `Args`). Operands are
//! device views ([`crate::device::DevSlice`], [`crate::device::DevSliceMut`]): views of
//! [`crate::device::DeviceBuf`]s, which the forward pass keeps in the device's memory, or host
//! slices and vectors, which convert into them (on a GPU those are copied around the launch).
//! The head's `_dev` variants take views only. The kernels trust their inputs (a GPU has no
//! bounds checks), so every check a kernel's contract needs happens here.

mod affine;
mod attention_shape;
mod deltanet;
mod embedding;
mod flashprefill;
mod gemm;
mod gemm_int;
mod kv_write;
mod lm_head;
mod lse_pick;
mod moe;
mod norm;
mod output_gate;
mod prefill_attention;
mod quant;
mod rope;
mod swiglu;
mod swiglu_mlp;
mod topk_pairs;

pub use affine::{AffineFormat, AffineParams, AffineView};
pub use attention_shape::{
    AttnShape, BlockLists, FlashPrefillParams, KvSlice, KvView, MAX_HEAD_DIM,
};
pub use deltanet::{
    delta_rule_chunked, deltanet_conv, deltanet_gated_norm, deltanet_gates, GdnShape, VHeadOrder,
    MAX_KEY_HEAD_DIM,
};
pub use embedding::embed_tokens;
pub use flashprefill::{
    flashprefill_select, flashprefill_stages, validate_flashprefill_params, FlashPrefillStages,
    MAX_BLOCK_SIZE,
};
pub use gemm::{
    gemm, gemm_bf16x3, gemm_experts, gemm_experts_gathered, gemm_same_x, quantize_activations,
    Activations, ExpertsJob, GemmJob, GemmOut, NARROW_ROWS,
};
pub use gemm_int::{integer_gemm_activations, interleave, interleave_into, interleaved_len};
pub use kv_write::{kv_write, KvCacheMut, KvRounding};
pub use lm_head::{lm_head, lm_head_dev, lm_head_dev_act, HeadWeight, WeightView};
pub use lse_pick::{lse_pick, lse_pick_dev, LsePick};
pub use moe::{moe_combine, moe_gather, moe_router, ExpertSlots, Routing};
pub use norm::{add_rmsnorm, rmsnorm};
pub use output_gate::output_gate;
pub use prefill_attention::{prefill_attention_dense, prefill_attention_sparse, Queries};
pub use quant::{Interleaved, QuantFormat, QuantView};
pub use rope::{qk_norm_rope, rope_inv_freq, HeadLayout, RopeTable};
pub use swiglu::swiglu;
pub use swiglu_mlp::swiglu_mlp;
pub use topk_pairs::{topk_pairs, topk_pairs_dev, TopK, MAX_TOP_K};

use crate::device::{BufError, LaunchError};

/// An op called with inconsistent shapes, or a launch that failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{op}: {what} has {got} elements, expected {expected}")]
    Shape {
        op: &'static str,
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("{op}: {message}")]
    Invalid { op: &'static str, message: String },
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Buffer(#[from] BufError),
}

fn check_len(
    op: &'static str,
    what: &'static str,
    got: usize,
    expected: usize,
) -> Result<(), OpError> {
    if got == expected {
        Ok(())
    } else {
        Err(OpError::Shape {
            op,
            what,
            got,
            expected,
        })
    }
}

fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32, OpError> {
    u32::try_from(v).map_err(|_| OpError::Invalid {
        op,
        message: format!("{what} = {v} does not fit in 32 bits"),
    })
}
