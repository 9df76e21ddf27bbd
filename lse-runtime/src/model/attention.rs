//! Gated full attention (GQA, q/k zero-centred RMSNorm, partial NeoX RoPE, sigmoid output gate).

use rayon::prelude::*;

use super::config::ModelConfig;
use super::error::Result;
use super::kv_cache::KvCache;
use super::linear::{gemm, linear, WeightMat};
use super::ops::{rmsnorm_zc_rows, rope_neox, sigmoid};
use super::weights::{Tensor, WeightStore};

/// Query rows per attention work item.
const QBLOCK: usize = 64;

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
/// their K/V to `cache`, and writes the layer output [t, H] to `out`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cfg: &ModelConfig,
    w: &AttnWeights,
    inv_freq: &[f32],
    u: &[f32],
    t: usize,
    pos0: usize,
    cache: &mut KvCache,
    out: &mut [f32],
) {
    let (nh, nkv, hd) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    let eps = cfg.rms_norm_eps as f32;
    let mut p = vec![0.0; t * 2 * nh * hd];
    let mut k = vec![0.0; t * nkv * hd];
    let mut v = vec![0.0; t * nkv * hd];
    linear(u, t, WeightMat::of(&w.q_proj), &mut p);
    linear(u, t, WeightMat::of(&w.k_proj), &mut k);
    linear(u, t, WeightMat::of(&w.v_proj), &mut v);

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
    for ti in 0..t {
        cache.write(
            pos0 + ti,
            &k[ti * nkv * hd..(ti + 1) * nkv * hd],
            &v[ti * nkv * hd..(ti + 1) * nkv * hd],
        );
    }
    drop((k, v));

    // Keys/values of all cached tokens, as f32, per kv head: [nkv][len][hd].
    let len = pos0 + t;
    let mut kf = vec![0.0; nkv * len * hd];
    let mut vf = vec![0.0; nkv * len * hd];
    kf.par_chunks_mut(len * hd)
        .zip(vf.par_chunks_mut(len * hd))
        .enumerate()
        .for_each(|(j, (kh, vh))| cache.read_head(j, hd, len, kh, vh));

    let group = nh / nkv;
    let scale = 1.0 / (hd as f32).sqrt();
    let nblocks = t.div_ceil(QBLOCK);
    // Each task: one query head, one block of query rows -> [rows, hd].
    let results: Vec<(usize, usize, Vec<f32>)> = (0..nh * nblocks)
        .into_par_iter()
        .map(|task| {
            let (h, b) = (task / nblocks, task % nblocks);
            let j = h / group;
            let t0 = b * QBLOCK;
            let rows = QBLOCK.min(t - t0);
            let end = pos0 + t0 + rows; // keys visible to the last row of the block
            let kh = &kf[j * len * hd..(j * len + end) * hd];
            let vh = &vf[j * len * hd..(j * len + end) * hd];
            let mut s = vec![0.0; rows * end];
            gemm(
                rows,
                hd,
                end,
                scale,
                &q[t0 * nh * hd + h * hd..],
                (nh * hd, 1),
                kh,
                (1, hd),
                0.0,
                &mut s,
                (end, 1),
            );
            for (i, row) in s.chunks_exact_mut(end).enumerate() {
                let visible = pos0 + t0 + i + 1;
                let m = row[..visible]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let mut sum = 0.0;
                for x in &mut row[..visible] {
                    *x = (*x - m).exp();
                    sum += *x;
                }
                let inv = 1.0 / sum;
                for x in &mut row[..visible] {
                    *x *= inv;
                }
                row[visible..].fill(0.0);
            }
            let mut o = vec![0.0; rows * hd];
            gemm(
                rows,
                end,
                hd,
                1.0,
                &s,
                (end, 1),
                vh,
                (hd, 1),
                0.0,
                &mut o,
                (hd, 1),
            );
            (h, t0, o)
        })
        .collect();
    // Gate and scatter into [t, nh*hd].
    let mut o = vec![0.0; t * nh * hd];
    for (h, t0, blk) in results {
        for (i, r) in blk.chunks_exact(hd).enumerate() {
            let base = (t0 + i) * nh * hd + h * hd;
            for d in 0..hd {
                o[base + d] = r[d] * sigmoid(gate[base + d]);
            }
        }
    }
    linear(&o, t, WeightMat::of(&w.o_proj), out);
}
