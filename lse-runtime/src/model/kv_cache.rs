//! Per-sequence state: the KV cache of the full-attention layers (bf16, f16 or f32) and the
//! Gated DeltaNet conv and recurrent states of the linear layers.

use super::config::{LayerKind, ModelConfig};
use super::error::{ModelError, Result};
use super::weights::{to_f32, DType};

/// KV-cache dtype used unless the user asks otherwise (llama.cpp's default is f16; LSE keeps
/// bf16 because Qwen3.5 checkpoints are bf16 and bf16 has f32's range).
pub const DEFAULT_KV_DTYPE: DType = DType::BF16;

/// Keys and values of one full-attention layer: layout [token][kv head][head_dim].
pub struct KvCache {
    dtype: DType,
    capacity: usize,
    row: usize,
    k: Vec<u8>,
    v: Vec<u8>,
}

fn store(dtype: DType, src: &[f32], dst: &mut [u8]) {
    match dtype {
        DType::BF16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::bf16::from_f32(*s).to_bits().to_le_bytes());
            }
        }
        DType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::f16::from_f32(*s).to_bits().to_le_bytes());
            }
        }
        DType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
    }
}

impl KvCache {
    /// An empty cache for `capacity` tokens of `row` values (nKV·hd) each for K and for V.
    pub fn new(dtype: DType, capacity: usize, row: usize) -> Self {
        let bytes = capacity * row * dtype.size();
        KvCache {
            dtype,
            capacity,
            row,
            k: vec![0; bytes],
            v: vec![0; bytes],
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
    /// Stores the K and V rows (each nKV·hd values) of token `pos`, rounding to the cache dtype.
    pub fn write(&mut self, pos: usize, k: &[f32], v: &[f32]) {
        let s = self.dtype.size();
        let r = pos * self.row * s..(pos + 1) * self.row * s;
        store(self.dtype, k, &mut self.k[r.clone()]);
        store(self.dtype, v, &mut self.v[r]);
    }
    /// Reads tokens `[0, len)` of kv head `h` (width `hd`) into `k_out`/`v_out` as f32 [len, hd].
    pub fn read_head(&self, h: usize, hd: usize, len: usize, k_out: &mut [f32], v_out: &mut [f32]) {
        let s = self.dtype.size();
        for t in 0..len {
            let off = (t * self.row + h * hd) * s;
            to_f32(
                self.dtype,
                &self.k[off..off + hd * s],
                &mut k_out[t * hd..(t + 1) * hd],
            );
            to_f32(
                self.dtype,
                &self.v[off..off + hd * s],
                &mut v_out[t * hd..(t + 1) * hd],
            );
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
    fn kv_roundtrip_per_dtype() {
        for (dt, tol) in [(DType::F32, 0.0), (DType::F16, 1e-3), (DType::BF16, 1e-2)] {
            let mut c = KvCache::new(dt, 3, 4);
            c.write(1, &[1.0, 2.0, 0.3, -4.0], &[0.1, 0.2, 0.3, 0.4]);
            let (mut k, mut v) = (vec![0.0; 4], vec![0.0; 4]);
            c.read_head(1, 2, 2, &mut k, &mut v);
            assert_eq!(&k[..2], &[0.0, 0.0]);
            assert!((k[2] - 0.3).abs() <= tol * 0.3 + 1e-9 && (v[3] - 0.4).abs() <= tol);
        }
    }
}
