//! The Gated DeltaNet layer's operations besides its projections (`../shared/research/
//! qwen35-spec.md` §8): the causal depthwise conv + SiLU with the q/k L2 norms, the per-token
//! gates β and g, the chunked gated delta rule, and the gated RMSNorm of its output.

pub mod conv;
pub mod delta_prep;
pub mod delta_rule;
pub mod gated_norm;
pub mod gates;
