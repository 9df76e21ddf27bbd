//! Gated full attention (GQA, q/k zero-centred RMSNorm, partial NeoX RoPE, sigmoid output gate).

use super::config::ModelConfig;
use super::device_weights::{small, DeviceWeight};
use super::error::Result;
use super::kv_cache::KvCache;
use super::linear::{linear, linear_same_x, WeightMat};
use super::prefill::PrefillAttention;
use super::weights::WeightStore;
use crate::device::{DevSlice, DevSliceMut, Device, DeviceBuf};
use crate::ops::{self, AttnShape, HeadLayout, KvRounding, Queries, RopeTable};

/// Weights of one full-attention layer, on the engine's device.
pub struct AttnWeights {
    q_proj: DeviceWeight,
    k_proj: DeviceWeight,
    v_proj: DeviceWeight,
    o_proj: DeviceWeight,
    q_norm: DeviceBuf<f32>,
    k_norm: DeviceBuf<f32>,
    /// How the queries meet the cache's keys: the checkpoint's rounding rule
    /// ([`WeightStore::attention_queries`]).
    queries: Queries,
    /// How its keys and values go into the cache: the same rule
    /// ([`WeightStore::kv_rounding`]).
    kv_rounding: KvRounding,
}

impl AttnWeights {
    /// Loads `{p}self_attn.*` onto `dev` with shapes checked against `cfg`.
    pub fn load(dev: &Device, ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let g = |n: &str, s: &[usize]| ws.get(&format!("{p}self_attn.{n}"), s);
        let w = |n: &str, s: &[usize]| DeviceWeight::new(dev, &g(n, s)?);
        Ok(AttnWeights {
            q_proj: w("q_proj.weight", &[2 * nh * hd, h])?,
            k_proj: w("k_proj.weight", &[nkv * hd, h])?,
            v_proj: w("v_proj.weight", &[nkv * hd, h])?,
            o_proj: w("o_proj.weight", &[h, nh * hd])?,
            q_norm: small(
                dev,
                &ws.norm_weight(&format!("{p}self_attn.q_norm.weight"), hd)?,
            )?,
            k_norm: small(
                dev,
                &ws.norm_weight(&format!("{p}self_attn.k_norm.weight"), hd)?,
            )?,
            queries: ws.attention_queries(),
            kv_rounding: ws.kv_rounding(),
        })
    }
}

/// Runs the layer on `u` [t, H] for tokens at absolute positions `pos0..pos0+t` (whose RoPE
/// angles `rope` holds), appending their K/V to `cache`, and writes the layer output [t, H] to
/// `out`. Every step is a LOOM kernel on `attn`'s device, every intermediate in its memory:
/// the projections, the q/k norms with RoPE, the cache write, attention and the output gate.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cfg: &ModelConfig,
    w: &AttnWeights,
    rope: &RopeTable,
    u: DevSlice<'_, f32>,
    pos0: usize,
    cache: &mut KvCache,
    attn: &PrefillAttention,
    out: DevSliceMut<'_, f32>,
) -> Result<()> {
    let (nh, nkv, hd) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    let t = rope.tokens();
    let eps = cfg.rms_norm_eps as f32;
    let dev = attn.device();
    // The q projection holds each head's queries then its output gate: [t, nh, 2, hd].
    let mut p = dev.scratch::<f32>(t * 2 * nh * hd)?;
    let mut k_raw = dev.scratch::<f32>(t * nkv * hd)?;
    let mut v = dev.scratch::<f32>(t * nkv * hd)?;
    linear_same_x(
        dev,
        u,
        vec![
            (WeightMat::of(&w.q_proj), p.view_mut()),
            (WeightMat::of(&w.k_proj), k_raw.view_mut()),
            (WeightMat::of(&w.v_proj), v.view_mut()),
        ],
    )?;

    let mut q = dev.scratch::<f32>(t * nh * hd)?;
    let q_layout = HeadLayout {
        heads: nh,
        head_dim: hd,
        row: 2 * nh * hd,
        head: 2 * hd,
    };
    ops::qk_norm_rope(dev, &p, q_layout, &w.q_norm, eps, rope, &mut q)?;
    let mut k = dev.scratch::<f32>(t * nkv * hd)?;
    let k_layout = HeadLayout {
        heads: nkv,
        head_dim: hd,
        row: nkv * hd,
        head: hd,
    };
    ops::qk_norm_rope(dev, &k_raw, k_layout, &w.k_norm, eps, rope, &mut k)?;
    drop(k_raw);
    cache.write(dev, pos0, k.view(), v.view(), w.kv_rounding)?;
    drop((k, v));

    let shape = AttnShape {
        t,
        pos0,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let mut o = dev.scratch::<f32>(t * nh * hd)?;
    attn.run(&shape, q.view(), cache.view(), w.queries, o.view_mut())?;
    drop(q);
    ops::output_gate(dev, &p, nh, hd, &mut o)?;
    linear(dev, o.view(), WeightMat::of(&w.o_proj), out)?;
    Ok(())
}
