//! What the prefill-attention ops share: the KV cache as the kernels read it, the shape of one
//! prefill pass, and FlashPrefill V2's parameters and block lists.

use half::{bf16, f16};

use super::OpError;
use crate::device::Arg;

/// One of a KV cache's two tensors, `[rows, n_kv_heads, head_dim]`, in its stored dtype.
#[derive(Clone, Copy, Debug)]
pub enum KvSlice<'a> {
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl<'a> KvSlice<'a> {
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

    /// The tensor as a read-only kernel argument.
    pub fn arg(self) -> Arg<'a> {
        match self {
            KvSlice::Bf16(x) => Arg::buf(x),
            KvSlice::F16(x) => Arg::buf(x),
            KvSlice::F32(x) => Arg::buf(x),
        }
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
        if self.n_heads % self.n_kv_heads != 0 {
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
            if x.len() < self.kv_len() * row || x.len() % row != 0 {
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
