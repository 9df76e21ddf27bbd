//! The feed-forward blocks' element-wise and routing steps in LOOM (the projections are the
//! GEMM's): SwiGLU's `silu(gate) · up`, the mixture-of-experts router (softmax, top-k,
//! renormalised weights), the gather of each expert's token rows, and the per-token combine
//! of the shared expert with the routed experts' outputs.

pub mod combine;
pub mod gather;
pub mod router;
pub mod swiglu;
