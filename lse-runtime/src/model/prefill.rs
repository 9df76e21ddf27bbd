//! How the full-attention layers run prefill attention: the dense LOOM kernel or FlashPrefill
//! V2 (selection + block-sparse kernel), on which device, and how dense the sparse passes were.

use std::sync::Mutex;

use crate::device::{DevSlice, DevSliceMut, Device};
use crate::ops::{self, AttnShape, FlashPrefillParams, KvView, OpError, Queries};

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

    /// Attention of one pass: `q` and `out` `[t, n_heads, head_dim]`, keys and values from
    /// `kv`, the scores' products as `queries` says.
    pub fn run(
        &self,
        shape: &AttnShape,
        q: DevSlice<'_, f32>,
        kv: KvView,
        queries: Queries,
        out: DevSliceMut<'_, f32>,
    ) -> Result<(), OpError> {
        if !self.is_sparse(shape) {
            return ops::prefill_attention_dense(self.device, shape, q, kv, queries, out);
        }
        let lists = ops::flashprefill_select(self.device, shape, q, kv.k, &self.params)?;
        let (kept, causal) = lists.kept_and_causal();
        {
            let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            b.0 += kept;
            b.1 += causal;
        }
        ops::prefill_attention_sparse(self.device, shape, q, kv, &lists, queries, out)
    }

    /// Kept over causal key blocks of every sparse pass so far; `None` when none ran.
    pub fn density(&self) -> Option<f64> {
        let (kept, causal) = *self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        (causal > 0).then(|| kept as f64 / causal as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;
    use crate::ops::KvSlice;

    fn shape(t: usize, pos0: usize) -> AttnShape {
        AttnShape {
            t,
            pos0,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 8,
            scale: 0.5,
        }
    }

    #[test]
    fn auto_goes_sparse_from_the_cut_over_on_cache_rows() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let p = FlashPrefillParams::default();
        let auto = PrefillAttention::new(&dev, SparseWhen::FromKvLen(2048), p);
        assert!(!auto.is_sparse(&shape(2047, 0)));
        assert!(auto.is_sparse(&shape(2048, 0)));
        // A short pass late in the window reads many cache rows.
        assert!(auto.is_sparse(&shape(16, 4000)));
        assert!(!PrefillAttention::dense(&dev).is_sparse(&shape(1 << 20, 0)));
        assert!(PrefillAttention::new(&dev, SparseWhen::Always, p).is_sparse(&shape(1, 0)));
    }

    #[test]
    fn density_counts_only_sparse_passes() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let params = FlashPrefillParams {
            block_size: 64,
            ..FlashPrefillParams::default()
        };
        let s = shape(200, 0);
        let q: Vec<f32> = (0..s.t * 2 * 8).map(|i| (i % 7) as f32 * 0.1).collect();
        let k: Vec<f32> = (0..s.t * 8).map(|i| (i % 5) as f32 * 0.1).collect();
        let kv = KvView {
            k: KvSlice::F32((&k).into()),
            v: KvSlice::F32((&k).into()),
        };
        let mut out = vec![0.0; q.len()];
        let dense = PrefillAttention::dense(&dev);
        dense
            .run(&s, (&q).into(), kv, Queries::F32, (&mut out).into())
            .unwrap();
        assert_eq!(dense.density(), None);
        let sparse = PrefillAttention::new(&dev, SparseWhen::Always, params);
        sparse
            .run(&s, (&q).into(), kv, Queries::F32, (&mut out).into())
            .unwrap();
        // 4 query blocks of 64: the default window of 4 blocks keeps all 1 + 2 + 3 + 4.
        assert_eq!(sparse.density(), Some(1.0));
        // Only the best block and the diagonal: fewer, and the counts accumulate over passes.
        let tight = FlashPrefillParams {
            alpha: 1.0,
            sink_blocks: 0,
            window_blocks: 1,
            last_full_blocks: 0,
            ..params
        };
        let sparse = PrefillAttention::new(&dev, SparseWhen::Always, tight);
        sparse
            .run(&s, (&q).into(), kv, Queries::F32, (&mut out).into())
            .unwrap();
        let once = sparse.density().unwrap();
        assert!(once < 1.0, "{once}");
        sparse
            .run(&s, (&q).into(), kv, Queries::F32, (&mut out).into())
            .unwrap();
        assert_eq!(sparse.density(), Some(once));
    }
}
