//! Prefill attention in LOOM: FlashPrefill V2's block pooling, block scores and block
//! selection, and one causal flash-attention kernel that runs dense or block-sparse.

pub mod block_score;
pub mod block_select;
pub mod key_blocks;
pub mod prefill;
