//! How the full-attention layers run prefill attention: the dense LOOM kernel or FlashPrefill
//! V2 (selection + block-sparse kernel), on which device, and how dense the sparse passes were.

use std::sync::Mutex;

use crate::device::Device;
use crate::ops::{self, AttnShape, FlashPrefillParams, KvView, OpError};

/// When FlashPrefill V2 runs (`--FlashPrefillV2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparseWhen {
    /// Never: dense attention everywhere.
    Never,
    /// For every prefill pass.
    Always,
    /// For passes whose attention reads at least this many cache rows (`pos0 + t`).
    FromKvLen(usize),
}

/// The prefill attention of one run: device, policy and the block counts of its sparse passes.
pub struct PrefillAttention<'d> {
    device: &'d Device,
    when: SparseWhen,
    params: FlashPrefillParams,
    /// (kept, causal) key blocks summed over every sparse pass and layer.
    blocks: Mutex<(u64, u64)>,
}

impl<'d> PrefillAttention<'d> {
    /// Attention on `device`, sparse as `when` says, with FlashPrefill V2 `params`.
    pub fn new(device: &'d Device, when: SparseWhen, params: FlashPrefillParams) -> Self {
        PrefillAttention {
            device,
            when,
            params,
            blocks: Mutex::new((0, 0)),
        }
    }

    /// Dense attention on `device`.
    pub fn dense(device: &'d Device) -> Self {
        Self::new(device, SparseWhen::Never, FlashPrefillParams::default())
    }

    /// The device the kernels run on.
    pub fn device(&self) -> &'d Device {
        self.device
    }

    /// Whether a pass of this shape runs FlashPrefill V2.
    pub fn is_sparse(&self, shape: &AttnShape) -> bool {
        match self.when {
            SparseWhen::Never => false,
            SparseWhen::Always => true,
            SparseWhen::FromKvLen(n) => shape.kv_len() >= n,
        }
    }

    /// Attention of one pass: `q` and `out` `[t, n_heads, head_dim]`, keys and values from `kv`.
    pub fn run(
        &self,
        shape: &AttnShape,
        q: &[f32],
        kv: KvView,
        out: &mut [f32],
    ) -> Result<(), OpError> {
        if !self.is_sparse(shape) {
            return ops::prefill_attention_dense(self.device, shape, q, kv, out);
        }
        let lists = ops::flashprefill_select(self.device, shape, q, kv.k, &self.params)?;
        let (kept, causal) = lists.kept_and_causal();
        {
            let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            b.0 += kept;
            b.1 += causal;
        }
        ops::prefill_attention_sparse(self.device, shape, q, kv, &lists, out)
    }

    /// Kept over causal key blocks of every sparse pass so far; `None` when none ran.
    pub fn density(&self) -> Option<f64> {
        let (kept, causal) = *self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        (causal > 0).then(|| kept as f64 / causal as f64)
    }
}
