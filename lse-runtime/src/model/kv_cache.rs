//! Per-sequence state: the KV cache of the full-attention layers (bf16, f16 or f32) and the
//! Gated DeltaNet conv and recurrent states of the linear layers.

use super::config::{LayerKind, ModelConfig};
use super::error::{ModelError, Result};
use half::{bf16, f16};

use super::weights::DType;
use crate::device::{BufError, DevSlice, Device, DeviceBuf, Elem};
use crate::ops::{self, KvCacheMut, KvRounding, KvSlice, KvView, OpError};

/// KV-cache dtype used unless the user asks otherwise (llama.cpp's default is f16; LSE keeps
/// bf16 because Qwen3.5 checkpoints are bf16 and bf16 has f32's range).
pub const DEFAULT_KV_DTYPE: DType = DType::BF16;

/// The keys and the values of a KV cache, in one storage dtype, in the device's memory.
enum KvStore {
    Bf16(DeviceBuf<bf16>, DeviceBuf<bf16>),
    F16(DeviceBuf<f16>, DeviceBuf<f16>),
    F32(DeviceBuf<f32>, DeviceBuf<f32>),
}

impl KvStore {
    /// `len` zeroed keys and as many values in `dev`'s memory (on the CPU-side devices from
    /// the allocator's zeroed pages: slots the windows never reach cost no memory and no
    /// time).
    fn zeros(dev: &Device, dtype: DType, len: usize) -> std::result::Result<KvStore, BufError> {
        Ok(match dtype {
            DType::BF16 => KvStore::Bf16(dev.alloc(len)?, dev.alloc(len)?),
            DType::F16 => KvStore::F16(dev.alloc(len)?, dev.alloc(len)?),
            DType::F32 => KvStore::F32(dev.alloc(len)?, dev.alloc(len)?),
        })
    }
}

/// Keys and values of one full-attention layer: layout `[token][kv head][head_dim]`, in the
/// cache dtype, as the attention kernels read them, in the device's memory.
pub struct KvCache {
    capacity: usize,
    row: usize,
    store: KvStore,
}

impl KvCache {
    /// An empty cache in `dev`'s memory for `capacity` tokens of `row` values (nKV·hd) each
    /// for K and for V; an error when the size overflows or the allocation fails.
    pub fn new(
        dev: &Device,
        dtype: DType,
        capacity: usize,
        row: usize,
    ) -> std::result::Result<Self, BufError> {
        let len = capacity.checked_mul(row).ok_or(BufError::Size {
            elem: dtype.name(),
            len: usize::MAX,
        })?;
        Ok(KvCache {
            capacity,
            row,
            store: KvStore::zeros(dev, dtype, len)?,
        })
    }
    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        match self.store {
            KvStore::Bf16(..) => DType::BF16,
            KvStore::F16(..) => DType::F16,
            KvStore::F32(..) => DType::F32,
        }
    }
    /// Capacity in tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Stores the K and V rows of tokens `pos0..`, `k` and `v` holding whole rows of nKV·hd
    /// values, rounding to the cache dtype as `rounding` says (`attention.kv_write` on `dev`).
    pub fn write(
        &mut self,
        dev: &Device,
        pos0: usize,
        k: DevSlice<'_, f32>,
        v: DevSlice<'_, f32>,
        rounding: KvRounding,
    ) -> std::result::Result<(), OpError> {
        let cache = match &mut self.store {
            KvStore::Bf16(kc, vc) => KvCacheMut::Bf16(kc.view_mut(), vc.view_mut()),
            KvStore::F16(kc, vc) => KvCacheMut::F16(kc.view_mut(), vc.view_mut()),
            KvStore::F32(kc, vc) => KvCacheMut::F32(kc.view_mut(), vc.view_mut()),
        };
        ops::kv_write(dev, k, v, self.row, pos0, cache, rounding)
    }
    /// The whole cache (every token slot, written or not) as the attention kernels take it.
    pub fn view(&self) -> KvView<'_> {
        let (k, v) = match &self.store {
            KvStore::Bf16(k, v) => (KvSlice::Bf16(k.view()), KvSlice::Bf16(v.view())),
            KvStore::F16(k, v) => (KvSlice::F16(k.view()), KvSlice::F16(v.view())),
            KvStore::F32(k, v) => (KvSlice::F32(k.view()), KvSlice::F32(v.view())),
        };
        KvView { k, v }
    }
    /// The keys and the values widened to f32, copied to the host (for tests and
    /// inspection).
    pub fn to_f32(&self) -> std::result::Result<(Vec<f32>, Vec<f32>), BufError> {
        fn widen<T: Elem + bytemuck::Zeroable>(
            b: &DeviceBuf<T>,
            f: impl Fn(T) -> f32,
        ) -> std::result::Result<Vec<f32>, BufError> {
            Ok(b.to_vec()?.into_iter().map(f).collect())
        }
        Ok(match &self.store {
            KvStore::Bf16(k, v) => (widen(k, bf16::to_f32)?, widen(v, bf16::to_f32)?),
            KvStore::F16(k, v) => (widen(k, f16::to_f32)?, widen(v, f16::to_f32)?),
            KvStore::F32(k, v) => (k.to_vec()?, v.to_vec()?),
        })
    }
}

/// Gated DeltaNet state of one linear-attention layer, in the device's memory.
pub struct LinearState {
    /// The last Kc−1 pre-conv rows of the qkv projection, oldest first: [(Kc−1), conv_dim].
    pub conv: DeviceBuf<f32>,
    /// Recurrent state per value head, `[Hv][dk][dv]`, f32.
    pub recurrent: DeviceBuf<f32>,
}

/// Element counts of a session's per-layer state, from the config.
struct StateSizes {
    /// Values per token of one full-attention layer's K (and of its V): nKV·hd.
    kv_row: usize,
    /// Conv state floats of one linear layer: (Kc−1)·conv_dim.
    conv: usize,
    /// Recurrent state floats of one linear layer: Hv·dk·dv.
    recurrent: usize,
    /// Full-attention layers.
    full: usize,
    /// Linear-attention layers.
    linear: usize,
    /// Bytes per KV element.
    kv_elem: usize,
    /// Tokens of KV cache.
    kv_len: usize,
}

impl StateSizes {
    fn of(cfg: &ModelConfig, kv_dtype: DType, kv_len: usize) -> Self {
        let full = cfg
            .layer_types
            .iter()
            .filter(|k| **k == LayerKind::Full)
            .count();
        StateSizes {
            kv_row: cfg.num_key_value_heads.saturating_mul(cfg.head_dim),
            conv: cfg
                .linear_conv_kernel_dim
                .saturating_sub(1)
                .saturating_mul(cfg.conv_dim()),
            recurrent: cfg
                .linear_num_value_heads
                .saturating_mul(cfg.linear_key_head_dim)
                .saturating_mul(cfg.linear_value_head_dim),
            full,
            linear: cfg.layer_types.len() - full,
            kv_elem: kv_dtype.size(),
            kv_len,
        }
    }

    /// Bytes of the KV caches of every full-attention layer (K and V), or `None` on overflow.
    fn kv_bytes(&self) -> Option<u128> {
        (self.kv_len as u128)
            .checked_mul(self.kv_row as u128)?
            .checked_mul(self.kv_elem as u128)?
            .checked_mul(2 * self.full as u128)
    }

    /// Bytes of every layer's state, or `None` when it does not fit a `usize`.
    fn total_bytes(&self) -> Option<usize> {
        let linear = ((self.conv as u128) + (self.recurrent as u128))
            .checked_mul(4 * self.linear as u128)?;
        usize::try_from(self.kv_bytes()?.checked_add(linear)?).ok()
    }

    /// "the KV cache needs 96.0 GiB for --kv-len N (...)".
    fn describe(&self, cfg: &ModelConfig, kv_dtype: DType, kv_len: usize) -> String {
        let gib = |b: Option<u128>| match b {
            Some(b) => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
            None => "more bytes than this machine can address".to_string(),
        };
        format!(
            "the KV cache needs {} for --kv-len {kv_len} ({} full-attention layer{} × K and V × \
             {} tokens × {} values of {} ({} bytes each)): lower --kv-len (it must hold one \
             chunk or window, --perplexity-ctx) or use a smaller --kv-cache-dtype",
            gib(self.kv_bytes()),
            self.full,
            if self.full == 1 { "" } else { "s" },
            kv_len,
            cfg.num_key_value_heads.saturating_mul(cfg.head_dim),
            kv_dtype.name(),
            kv_dtype.size()
        )
    }
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
    /// A fresh session for `cfg` whose KV cache holds `kv_len` tokens of `kv_dtype`, its state
    /// in `dev`'s memory.
    pub fn new(dev: &Device, cfg: &ModelConfig, kv_dtype: DType, kv_len: usize) -> Result<Self> {
        if kv_len == 0 {
            return Err(ModelError::InvalidArgument(
                "kv_len must be at least 1 token".into(),
            ));
        }
        let sizes = StateSizes::of(cfg, kv_dtype, kv_len);
        let too_big = || ModelError::OutOfMemory {
            what: sizes.describe(cfg, kv_dtype, kv_len),
        };
        sizes.total_bytes().ok_or_else(too_big)?;
        let refused = |e: BufError| ModelError::OutOfMemory {
            what: format!("{} ({e})", sizes.describe(cfg, kv_dtype, kv_len)),
        };
        let mut layers = Vec::new();
        layers
            .try_reserve(cfg.layer_types.len())
            .map_err(|_| too_big())?;
        for kind in &cfg.layer_types {
            layers.push(match kind {
                LayerKind::Full => LayerState::Full(
                    KvCache::new(dev, kv_dtype, kv_len, sizes.kv_row).map_err(refused)?,
                ),
                LayerKind::Linear => LayerState::Linear(LinearState {
                    conv: dev.alloc(sizes.conv).map_err(refused)?,
                    recurrent: dev.alloc(sizes.recurrent).map_err(refused)?,
                }),
            });
        }
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
    use crate::device::Pool;

    #[test]
    fn kv_write_rounds_to_the_cache_dtype_at_the_token_row() {
        let dev = Device::open(Pool::Host).unwrap();
        for (dt, tol) in [(DType::F32, 0.0), (DType::F16, 1e-3), (DType::BF16, 1e-2)] {
            let mut c = KvCache::new(&dev, dt, 3, 4).unwrap();
            let (k, v) = ([1.0, 2.0, 0.3, -4.0], [0.1, 0.2, 0.3, 0.4]);
            c.write(&dev, 1, (&k).into(), (&v).into(), KvRounding::CacheDtype)
                .unwrap();
            let (k, v) = c.to_f32().unwrap();
            assert_eq!(k.len(), 12);
            assert_eq!(&k[..4], &[0.0; 4]);
            assert!((k[6] - 0.3).abs() <= tol * 0.3 + 1e-9 && (v[7] - 0.4).abs() <= tol);
            assert_eq!(&k[8..], &[0.0; 4]);
        }
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;
    use crate::model::synthetic::SyntheticSpec;

    fn config() -> ModelConfig {
        let spec = SyntheticSpec::qwen35_0_8b();
        let text = spec.config_json().to_string();
        ModelConfig::from_json_str(&text, std::path::Path::new("config.json")).unwrap()
    }

    #[test]
    fn a_kv_len_beyond_memory_is_an_error_saying_how_much() {
        let cfg = config();
        // 2^40 tokens: 2^50 bytes per K or V store, past any address space (so the
        // allocation fails whatever the machine's overcommit policy).
        let dev = Device::open(crate::device::Pool::Host).unwrap();
        let msg = match Session::new(&dev, &cfg, DType::BF16, 1 << 40) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a 2^40-token KV cache was allocated"),
        };
        assert!(
            msg.contains("the KV cache needs 12582912.0 GiB for --kv-len 1099511627776"),
            "{msg}"
        );
        // 2^57 tokens: the byte count overflows a usize instead of wrapping to 0.
        let msg = match Session::new(&dev, &cfg, DType::F32, 1 << 57) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a 2^57-token KV cache was allocated"),
        };
        assert!(msg.contains(&format!("--kv-len {}", 1u64 << 57)), "{msg}");
        assert!(KvCache::new(&dev, DType::F32, usize::MAX, 2).is_err());
        // A sane size still works.
        assert_eq!(
            Session::new(&dev, &cfg, DType::BF16, 64)
                .unwrap()
                .capacity(),
            64
        );
    }
}
