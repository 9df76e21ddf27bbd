//! The full-attention layer in LOOM: the q/k norms with RoPE, the KV-cache write, FlashPrefill
//! V2's block pooling, block scores and block selection, one causal flash-attention kernel
//! that runs dense or block-sparse, and the sigmoid output gate.

pub mod block_score;
pub mod block_select;
pub mod key_blocks;
pub mod kv_write;
pub mod output_gate;
pub mod prefill;
pub mod qk_norm_rope;
