//! Gated full attention (GQA, q/k zero-centred RMSNorm, partial NeoX RoPE, sigmoid output gate).

use super::config::ModelConfig;
use super::error::Result;
use super::kv_cache::KvCache;
use super::linear::{linear, WeightMat};
use super::prefill::PrefillAttention;
use super::weights::{Tensor, WeightStore};
use crate::ops::{self, AttnShape, HeadLayout, RopeTable};

/// Weights of one full-attention layer.
pub struct AttnWeights {
    q_proj: Tensor,
    k_proj: Tensor,
    v_proj: Tensor,
    o_proj: Tensor,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
}

impl AttnWeights {
    /// Loads `{p}self_attn.*` with shapes checked against `cfg`.
    pub fn load(ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let g = |n: &str, s: &[usize]| ws.get(&format!("{p}self_attn.{n}"), s);
        Ok(AttnWeights {
            q_proj: g("q_proj.weight", &[2 * nh * hd, h])?,
            k_proj: g("k_proj.weight", &[nkv * hd, h])?,
            v_proj: g("v_proj.weight", &[nkv * hd, h])?,
            o_proj: g("o_proj.weight", &[h, nh * hd])?,
            q_norm: g("q_norm.weight", &[hd])?.to_f32_vec(),
            k_norm: g("k_norm.weight", &[hd])?.to_f32_vec(),
        })
    }
}

/// Runs the layer on `u` [t, H] for tokens at absolute positions `pos0..pos0+t` (whose RoPE
/// angles `rope` holds), appending their K/V to `cache`, and writes the layer output [t, H] to
/// `out`. Every step is a LOOM kernel on `attn`'s device: the projections, the q/k norms with
/// RoPE, the cache write, attention and the output gate.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cfg: &ModelConfig,
    w: &AttnWeights,
    rope: &RopeTable,
    u: &[f32],
    t: usize,
    pos0: usize,
    cache: &mut KvCache,
    attn: &PrefillAttention,
    out: &mut [f32],
) -> Result<()> {
    let (nh, nkv, hd) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    let eps = cfg.rms_norm_eps as f32;
    let dev = attn.device();
    // The q projection holds each head's queries then its output gate: [t, nh, 2, hd].
    let mut p = vec![0.0; t * 2 * nh * hd];
    let mut k_raw = vec![0.0; t * nkv * hd];
    let mut v = vec![0.0; t * nkv * hd];
    linear(dev, u, t, WeightMat::of(&w.q_proj), &mut p)?;
    linear(dev, u, t, WeightMat::of(&w.k_proj), &mut k_raw)?;
    linear(dev, u, t, WeightMat::of(&w.v_proj), &mut v)?;

    let mut q = vec![0.0; t * nh * hd];
    let q_layout = HeadLayout {
        heads: nh,
        head_dim: hd,
        row: 2 * nh * hd,
        head: 2 * hd,
    };
    ops::qk_norm_rope(dev, &p, q_layout, &w.q_norm, eps, rope, &mut q)?;
    let mut k = vec![0.0; t * nkv * hd];
    let k_layout = HeadLayout {
        heads: nkv,
        head_dim: hd,
        row: nkv * hd,
        head: hd,
    };
    ops::qk_norm_rope(dev, &k_raw, k_layout, &w.k_norm, eps, rope, &mut k)?;
    drop(k_raw);
    cache.write(dev, pos0, &k, &v)?;
    drop((k, v));

    let shape = AttnShape {
        t,
        pos0,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let mut o = vec![0.0; t * nh * hd];
    attn.run(&shape, &q, cache.view(), &mut o)?;
    drop(q);
    ops::output_gate(dev, &p, nh, hd, &mut o)?;
    linear(dev, &o, t, WeightMat::of(&w.o_proj), out)?;
    Ok(())
}
