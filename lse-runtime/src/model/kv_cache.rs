//! Per-sequence state: the KV cache of the full-attention layers (bf16, f16 or f32) and the
//! Gated DeltaNet conv and recurrent states of the linear layers.

use super::config::{LayerKind, ModelConfig};
use super::error::{ModelError, Result};
use half::{bf16, f16};

use super::weights::DType;
use crate::ops::{KvSlice, KvView};

/// KV-cache dtype used unless the user asks otherwise (llama.cpp's default is f16; LSE keeps
/// bf16 because Qwen3.5 checkpoints are bf16 and bf16 has f32's range).
pub const DEFAULT_KV_DTYPE: DType = DType::BF16;

/// One tensor of a KV cache in its storage dtype.
enum KvStore {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl KvStore {
    /// Zeroed storage from the allocator's zeroed pages: slots the windows never reach cost
    /// no memory and no time.
    fn zeros(dtype: DType, len: usize) -> KvStore {
        match dtype {
            DType::BF16 => KvStore::Bf16(bytemuck::zeroed_vec(len)),
            DType::F16 => KvStore::F16(bytemuck::zeroed_vec(len)),
            DType::F32 => KvStore::F32(bytemuck::zeroed_vec(len)),
        }
    }

    /// Rounds `src` to the storage dtype into elements `at..at + src.len()`.
    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            KvStore::Bf16(x) => {
                for (d, &s) in x[at..at + src.len()].iter_mut().zip(src) {
                    *d = bf16::from_f32(s);
                }
            }
            KvStore::F16(x) => {
                for (d, &s) in x[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(s);
                }
            }
            KvStore::F32(x) => x[at..at + src.len()].copy_from_slice(src),
        }
    }

    fn slice(&self) -> KvSlice<'_> {
        match self {
            KvStore::Bf16(x) => KvSlice::Bf16(x),
            KvStore::F16(x) => KvSlice::F16(x),
            KvStore::F32(x) => KvSlice::F32(x),
        }
    }
}

/// Keys and values of one full-attention layer: layout [token][kv head][head_dim], in the
/// cache dtype, as the attention kernels read them.
pub struct KvCache {
    dtype: DType,
    capacity: usize,
    row: usize,
    k: KvStore,
    v: KvStore,
}

impl KvCache {
    /// An empty cache for `capacity` tokens of `row` values (nKV·hd) each for K and for V.
    pub fn new(dtype: DType, capacity: usize, row: usize) -> Self {
        KvCache {
            dtype,
            capacity,
            row,
            k: KvStore::zeros(dtype, capacity * row),
            v: KvStore::zeros(dtype, capacity * row),
        }
    }
    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Capacity in tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Stores the K and V rows of tokens `pos0..`, `k` and `v` holding whole rows of nKV·hd
    /// values, rounding to the cache dtype.
    pub fn write(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        self.k.write(pos0 * self.row, k);
        self.v.write(pos0 * self.row, v);
    }
    /// The whole cache (every token slot, written or not) as the attention kernels take it.
    pub fn view(&self) -> KvView<'_> {
        KvView {
            k: self.k.slice(),
            v: self.v.slice(),
        }
    }
}

/// Gated DeltaNet state of one linear-attention layer.
pub struct LinearState {
    /// The last Kc−1 pre-conv rows of the qkv projection, oldest first: [(Kc−1), conv_dim].
    pub conv: Vec<f32>,
    /// Recurrent state per value head, [Hv][dk][dv], f32.
    pub recurrent: Vec<f32>,
}

/// Per-layer state of a session.
pub enum LayerState {
    /// Full attention: a KV cache.
    Full(KvCache),
    /// Linear attention: conv + recurrent state.
    Linear(LinearState),
}

/// One sequence being scored: its position and all per-layer caches.
pub struct Session {
    pub(crate) pos: usize,
    pub(crate) layers: Vec<LayerState>,
    capacity: usize,
}

impl Session {
    /// A fresh session for `cfg` whose KV cache holds `kv_len` tokens of `kv_dtype`.
    pub fn new(cfg: &ModelConfig, kv_dtype: DType, kv_len: usize) -> Result<Self> {
        if kv_len == 0 {
            return Err(ModelError::InvalidArgument(
                "kv_len must be at least 1 token".into(),
            ));
        }
        let row = cfg.num_key_value_heads * cfg.head_dim;
        let layers = cfg
            .layer_types
            .iter()
            .map(|k| match k {
                LayerKind::Full => LayerState::Full(KvCache::new(kv_dtype, kv_len, row)),
                LayerKind::Linear => LayerState::Linear(LinearState {
                    conv: vec![0.0; (cfg.linear_conv_kernel_dim - 1) * cfg.conv_dim()],
                    recurrent: vec![
                        0.0;
                        cfg.linear_num_value_heads
                            * cfg.linear_key_head_dim
                            * cfg.linear_value_head_dim
                    ],
                }),
            })
            .collect();
        Ok(Session {
            pos: 0,
            layers,
            capacity: kv_len,
        })
    }
    /// Number of tokens already processed (the next token's absolute position).
    pub fn position(&self) -> usize {
        self.pos
    }
    /// KV capacity in tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Errors (before any work) if `adding` more tokens would overflow the KV cache.
    pub fn check_fits(&self, adding: usize) -> Result<()> {
        if self.pos + adding > self.capacity {
            return Err(ModelError::KvOverflow {
                used: self.pos,
                adding,
                capacity: self.capacity,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_write_rounds_to_the_cache_dtype_at_the_token_row() {
        for (dt, tol) in [(DType::F32, 0.0), (DType::F16, 1e-3), (DType::BF16, 1e-2)] {
            let mut c = KvCache::new(dt, 3, 4);
            c.write(1, &[1.0, 2.0, 0.3, -4.0], &[0.1, 0.2, 0.3, 0.4]);
            let widen = |x: KvSlice| -> Vec<f32> {
                match x {
                    KvSlice::Bf16(x) => x.iter().map(|v| v.to_f32()).collect(),
                    KvSlice::F16(x) => x.iter().map(|v| v.to_f32()).collect(),
                    KvSlice::F32(x) => x.to_vec(),
                }
            };
            let (k, v) = (widen(c.view().k), widen(c.view().v));
            assert_eq!(k.len(), 12);
            assert_eq!(&k[..4], &[0.0; 4]);
            assert!((k[6] - 0.3).abs() <= tol * 0.3 + 1e-9 && (v[7] - 0.4).abs() <= tol);
            assert_eq!(&k[8..], &[0.0; 4]);
        }
    }
}
