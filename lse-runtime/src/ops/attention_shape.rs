//! What the prefill-attention ops share: the KV cache as the kernels read it, the shape of one
//! prefill pass, and FlashPrefill V2's parameters and block lists.

use half::{bf16, f16};

use super::OpError;
use crate::device::DevSlice;

/// One of a KV cache's two tensors, `[rows, n_kv_heads, head_dim]`, in its stored dtype, in
/// host or device memory.
#[derive(Clone, Copy, Debug)]
pub enum KvSlice<'a> {
    Bf16(DevSlice<'a, bf16>),
    F16(DevSlice<'a, f16>),
    F32(DevSlice<'a, f32>),
}

impl KvSlice<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            KvSlice::Bf16(x) => x.len(),
            KvSlice::F16(x) => x.len(),
            KvSlice::F32(x) => x.len(),
        }
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Picks the kernel instance for this slice's dtype out of `(bf16, f16, f32)`.
    pub fn pick<T>(&self, instances: (T, T, T)) -> T {
        match self {
            KvSlice::Bf16(_) => instances.0,
            KvSlice::F16(_) => instances.1,
            KvSlice::F32(_) => instances.2,
        }
    }
}

/// A KV cache's keys and values, same dtype and length.
#[derive(Clone, Copy, Debug)]
pub struct KvView<'a> {
    pub k: KvSlice<'a>,
    pub v: KvSlice<'a>,
}

/// One prefill pass of one full-attention layer: `t` query rows at absolute positions
/// `pos0..pos0 + t`, attending causally to cache rows `0..pos0 + t`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnShape {
    pub t: usize,
    pub pos0: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Softmax scale applied to q·k (1/sqrt(head_dim) for Qwen3.5).
    pub scale: f32,
}

impl AttnShape {
    /// Cache rows the pass reads: `pos0 + t`.
    pub fn kv_len(&self) -> usize {
        self.pos0 + self.t
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Checks the shape itself and the buffers against it: `q` and `out` are
    /// `[t, n_heads, head_dim]`, the cache holds at least `pos0 + t` rows of
    /// `n_kv_heads * head_dim`, and every size fits the kernels' 32-bit indexes.
    pub fn check(
        &self,
        op: &'static str,
        q: usize,
        kv: &KvView,
        out: usize,
    ) -> Result<(), OpError> {
        let invalid = |message: String| Err(OpError::Invalid { op, message });
        if self.t == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return invalid(format!("empty shape {self:?}"));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return invalid(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.head_dim > MAX_HEAD_DIM {
            return invalid(format!(
                "head_dim {} is above the kernels' maximum {MAX_HEAD_DIM}",
                self.head_dim
            ));
        }
        let rows = self.t * self.n_heads * self.head_dim;
        super::check_len(op, "q", q, rows)?;
        super::check_len(op, "out", out, rows)?;
        let row = self.n_kv_heads * self.head_dim;
        for (what, x) in [("k", kv.k), ("v", kv.v)] {
            if x.len() < self.kv_len() * row || !x.len().is_multiple_of(row) {
                return invalid(format!(
                    "{what} has {} elements, expected a whole number of {row}-element rows, at least {}",
                    x.len(),
                    self.kv_len()
                ));
            }
        }
        super::to_u32(op, "k elements", kv.k.len())?;
        super::to_u32(op, "q elements", rows)?;
        Ok(())
    }
}

/// Largest head dimension the attention kernels take (their shared-memory tiles are sized
/// for it); every Qwen3.5 checkpoint has 256.
pub const MAX_HEAD_DIM: usize = 256;

/// FlashPrefill V2's selection parameters (`../shared/research/flashprefill.md` §1.5, §4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashPrefillParams {
    /// Tokens per query block and per key block.
    pub block_size: usize,
    /// Relative threshold: key block J is kept when its score is at least `alpha` times the
    /// row's largest score. 0 keeps every causal block.
    pub alpha: f32,
    /// The first `sink_blocks` key blocks are always kept.
    pub sink_blocks: usize,
    /// Key blocks with `0 <= I - J < window_blocks` are always kept (the diagonal included);
    /// at least 1.
    pub window_blocks: usize,
    /// The pass's last `last_full_blocks` query blocks attend to every causal key block.
    pub last_full_blocks: usize,
    /// The `min_budget` best-scoring causal blocks of each row are also kept.
    pub min_budget: usize,
}

impl Default for FlashPrefillParams {
    /// Blocks of 128, 2 sink blocks, a 4-block window and no minimum budget, as published;
    /// alpha 0.5 and no dense trailing query blocks, chosen by measurement on a trained
    /// long-context model (README, "FlashPrefill V2's quality"): the published alpha 0.1 kept
    /// every block there, and a dense tail made half of every default 512-token pass dense and
    /// the selection depend on the pass size.
    fn default() -> Self {
        FlashPrefillParams {
            block_size: 128,
            alpha: 0.5,
            sink_blocks: 2,
            window_blocks: 4,
            last_full_blocks: 0,
            min_budget: 0,
        }
    }
}

/// Per-KV-head block lists of one prefill pass: which key blocks each query block attends to.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockLists {
    /// Tokens per block.
    pub block_size: usize,
    /// Absolute index of the pass's first query block (`pos0 / block_size`).
    pub qblock0: usize,
    /// Query blocks the pass touches: `(pos0 + t - 1) / block_size - qblock0 + 1`.
    pub n_qblocks: usize,
    /// Row stride of `blocks`: the number of causal key blocks of the last query block.
    pub max_blocks: usize,
    /// `[n_kv_heads, n_qblocks, max_blocks]`: absolute key-block ids, ascending; the first
    /// `counts[..]` entries of each row are meaningful.
    pub blocks: Vec<u32>,
    /// `[n_kv_heads, n_qblocks]`: kept blocks per row.
    pub counts: Vec<u32>,
}

impl BlockLists {
    /// Kept blocks over causal blocks, over every row of every KV head.
    pub fn density(&self) -> f64 {
        let (kept, causal) = self.kept_and_causal();
        if causal == 0 {
            1.0
        } else {
            kept as f64 / causal as f64
        }
    }

    /// (kept, causal) block pairs over every row: query block `I` has `I + 1` causal key blocks.
    pub fn kept_and_causal(&self) -> (u64, u64) {
        let kept = self.counts.iter().map(|&c| u64::from(c)).sum();
        let heads = self.counts.len().checked_div(self.n_qblocks).unwrap_or(0) as u64;
        let per_head: u64 = (0..self.n_qblocks)
            .map(|i| (self.qblock0 + i + 1) as u64)
            .sum();
        (kept, heads * per_head)
    }
}
