//! Prefill attention in LOOM: dense causal flash attention, and FlashPrefill V2's block
//! pooling, block scores, block selection and block-sparse attention.

pub mod block_score;
pub mod block_select;
pub mod dense;
pub mod key_blocks;
pub mod sparse;
