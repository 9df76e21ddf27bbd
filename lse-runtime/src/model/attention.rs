//! Gated full attention (GQA, q/k zero-centred RMSNorm, partial NeoX RoPE, sigmoid output gate).

use rayon::prelude::*;

use super::config::ModelConfig;
use super::error::Result;
use super::kv_cache::KvCache;
use super::linear::{linear, WeightMat};
use super::ops::{rmsnorm_zc_rows, rope_neox, sigmoid};
use super::prefill::PrefillAttention;
use super::weights::{Tensor, WeightStore};
use crate::ops::AttnShape;

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

/// Runs the layer on `u` [t, H] for tokens at absolute positions `pos0..pos0+t`, appending
/// their K/V to `cache`, and writes the layer output [t, H] to `out`. Projections, norms and
/// RoPE run here; attention itself runs through `attn`'s LOOM kernels.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cfg: &ModelConfig,
    w: &AttnWeights,
    inv_freq: &[f32],
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
    let mut p = vec![0.0; t * 2 * nh * hd];
    let mut k = vec![0.0; t * nkv * hd];
    let mut v = vec![0.0; t * nkv * hd];
    let dev = attn.device();
    linear(dev, u, t, WeightMat::of(&w.q_proj), &mut p)?;
    linear(dev, u, t, WeightMat::of(&w.k_proj), &mut k)?;
    linear(dev, u, t, WeightMat::of(&w.v_proj), &mut v)?;

    // Split per-head [q | gate], normalise and rotate q; normalise and rotate k.
    let mut q = vec![0.0; t * nh * hd];
    let mut gate = vec![0.0; t * nh * hd];
    q.par_chunks_mut(nh * hd)
        .zip(gate.par_chunks_mut(nh * hd))
        .zip(p.par_chunks(2 * nh * hd))
        .enumerate()
        .for_each(|(ti, ((qr, gr), pr))| {
            for h in 0..nh {
                qr[h * hd..(h + 1) * hd].copy_from_slice(&pr[2 * h * hd..2 * h * hd + hd]);
                gr[h * hd..(h + 1) * hd].copy_from_slice(&pr[2 * h * hd + hd..2 * (h + 1) * hd]);
            }
            rmsnorm_zc_rows(qr, &w.q_norm, eps);
            for h in 0..nh {
                rope_neox(&mut qr[h * hd..(h + 1) * hd], inv_freq, pos0 + ti);
            }
        });
    drop(p);
    k.par_chunks_mut(nkv * hd).enumerate().for_each(|(ti, kr)| {
        rmsnorm_zc_rows(kr, &w.k_norm, eps);
        for h in 0..nkv {
            rope_neox(&mut kr[h * hd..(h + 1) * hd], inv_freq, pos0 + ti);
        }
    });
    cache.write(pos0, &k, &v);
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
    o.par_chunks_mut(nh * hd)
        .zip(gate.par_chunks(nh * hd))
        .for_each(|(o, g)| {
            for (x, &g) in o.iter_mut().zip(g) {
                *x *= sigmoid(g);
            }
        });
    linear(dev, &o, t, WeightMat::of(&w.o_proj), out)?;
    Ok(())
}
