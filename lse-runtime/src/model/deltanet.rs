//! Gated DeltaNet (linear attention) layer: projections, causal depthwise conv + SiLU,
//! L2-normalised q/k, the gated delta rule (chunked, C = 64; the per-token recurrence is kept
//! as the test oracle), gated RMSNorm and the output projection.

use rayon::prelude::*;

use super::config::ModelConfig;
use super::error::Result;
use super::kv_cache::LinearState;
use super::linear::{gemm, linear, WeightMat};
use super::ops::{gated_rmsnorm, l2norm_scaled, sigmoid, silu, softplus};
use super::weights::{Tensor, WeightStore};
use crate::device::Device;

/// Chunk length of the chunked delta rule (as in transformers, FLA and llama.cpp).
pub const CHUNK: usize = 64;

/// Weights of one Gated DeltaNet layer.
pub struct GdnWeights {
    in_proj_qkv: Tensor,
    in_proj_z: Tensor,
    in_proj_b: Tensor,
    in_proj_a: Tensor,
    out_proj: Tensor,
    /// [conv_dim, Kc].
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    /// −exp(A_log), per value head.
    neg_a: Vec<f32>,
    /// Plain gated-norm weight [dv].
    norm: Vec<f32>,
}

impl GdnWeights {
    /// Loads `{p}linear_attn.*` with shapes checked against `cfg`.
    pub fn load(ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, hv, dv) = (
            cfg.hidden_size,
            cfg.linear_num_value_heads,
            cfg.linear_value_head_dim,
        );
        let g = |n: &str, s: &[usize]| ws.get(&format!("{p}linear_attn.{n}"), s);
        Ok(GdnWeights {
            in_proj_qkv: g("in_proj_qkv.weight", &[cfg.conv_dim(), h])?,
            in_proj_z: g("in_proj_z.weight", &[cfg.value_dim(), h])?,
            in_proj_b: g("in_proj_b.weight", &[hv, h])?,
            in_proj_a: g("in_proj_a.weight", &[hv, h])?,
            out_proj: g("out_proj.weight", &[h, cfg.value_dim()])?,
            conv_w: g(
                "conv1d.weight",
                &[cfg.conv_dim(), 1, cfg.linear_conv_kernel_dim],
            )?
            .to_f32_vec(),
            dt_bias: g("dt_bias", &[hv])?.to_f32_vec(),
            neg_a: g("A_log", &[hv])?
                .to_f32_vec()
                .into_iter()
                .map(|a| -a.exp())
                .collect(),
            norm: g("norm.weight", &[dv])?.to_f32_vec(),
        })
    }
}

/// Per-token recurrent gated delta rule for one value head (the definition; test oracle).
///
/// `q`, `k` are [t, dk] (already normalised and scaled), `v` is [t, dv], `beta` and `g` are
/// [t]; `state` is [dk, dv] and is updated; `out` is [t, dv].
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_recurrent(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: &[f32],
    g: &[f32],
    dk: usize,
    dv: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    let mut u = vec![0.0f32; dv];
    for t in 0..beta.len() {
        let a = g[t].exp();
        for s in state.iter_mut() {
            *s *= a;
        }
        let kt = &k[t * dk..(t + 1) * dk];
        u.fill(0.0);
        for (i, ki) in kt.iter().enumerate() {
            for (uj, sj) in u.iter_mut().zip(&state[i * dv..(i + 1) * dv]) {
                *uj += sj * ki;
            }
        }
        for (j, uj) in u.iter_mut().enumerate() {
            *uj = beta[t] * (v[t * dv + j] - *uj);
        }
        for (i, ki) in kt.iter().enumerate() {
            for (sj, dj) in state[i * dv..(i + 1) * dv].iter_mut().zip(&u) {
                *sj += ki * dj;
            }
        }
        let o = &mut out[t * dv..(t + 1) * dv];
        o.fill(0.0);
        for (i, qi) in q[t * dk..(t + 1) * dk].iter().enumerate() {
            for (oj, sj) in o.iter_mut().zip(&state[i * dv..(i + 1) * dv]) {
                *oj += sj * qi;
            }
        }
    }
}

/// Chunked gated delta rule (C = [`CHUNK`]); same contract as [`delta_rule_recurrent`].
///
/// Per chunk it forms L = I + strict_lower(diag(β) K Kᵀ ⊙ D), inverts it explicitly (as
/// transformers' `torch_chunk_gated_delta_rule` does; here in f64, it is only C×C), and turns
/// everything else into GEMMs. A last chunk shorter than C needs no padding.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_chunked(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: &[f32],
    g: &[f32],
    dk: usize,
    dv: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    let t = beta.len();
    let c = CHUNK;
    let mut gam = vec![0.0f32; c];
    let mut kk = vec![0.0f32; c * c];
    let mut qk = vec![0.0f32; c * c];
    let mut u = vec![0.0f32; c * dv];
    let mut w = vec![0.0f32; c * dk];
    let mut kd = vec![0.0f32; c * dk];
    let mut tinv = vec![0.0f32; c * c];
    let mut tinv64 = vec![0.0f64; c * c];
    let mut bv = vec![0.0f32; c * dv];
    let mut bk = vec![0.0f32; c * dk];
    let mut t0 = 0;
    while t0 < t {
        let n = c.min(t - t0);
        let (qc, kc, vc) = (
            &q[t0 * dk..(t0 + n) * dk],
            &k[t0 * dk..(t0 + n) * dk],
            &v[t0 * dv..(t0 + n) * dv],
        );
        let (bc, gc) = (&beta[t0..t0 + n], &g[t0..t0 + n]);
        let mut acc = 0.0f32;
        for i in 0..n {
            acc += gc[i];
            gam[i] = acc;
        }
        // K Kᵀ and Q Kᵀ, [n, n].
        gemm(
            n,
            dk,
            n,
            1.0,
            kc,
            (dk, 1),
            kc,
            (1, dk),
            0.0,
            &mut kk,
            (n, 1),
        );
        gemm(
            n,
            dk,
            n,
            1.0,
            qc,
            (dk, 1),
            kc,
            (1, dk),
            0.0,
            &mut qk,
            (n, 1),
        );
        // L (strictly lower part) = β_i (k_i·k_j) exp(Γ_i − Γ_j); masked QKᵀ ⊙ D (with diagonal).
        for i in 0..n {
            for j in 0..n {
                if j < i {
                    let d = (gam[i] - gam[j]).exp();
                    kk[i * n + j] *= bc[i] * d;
                    qk[i * n + j] *= d;
                } else if j > i {
                    qk[i * n + j] = 0.0;
                }
            }
        }
        // T = L⁻¹ (unit lower triangular), row by row in f64: T_i = e_i − Σ_{m<i} L_im T_m.
        for i in 0..n {
            let (done, rest) = tinv64.split_at_mut(i * n);
            let row = &mut rest[..n];
            row.fill(0.0);
            row[i] = 1.0;
            for m in 0..i {
                let l = kk[i * n + m] as f64;
                if l != 0.0 {
                    for (x, y) in row[..=m].iter_mut().zip(&done[m * n..m * n + m + 1]) {
                        *x -= l * y;
                    }
                }
            }
        }
        for (a, b) in tinv[..n * n].iter_mut().zip(&tinv64[..n * n]) {
            *a = *b as f32;
        }
        // U = T diag(β) V and W = T diag(β e^Γ) K.
        for i in 0..n {
            let eg = gam[i].exp();
            for jj in 0..dv {
                bv[i * dv + jj] = bc[i] * vc[i * dv + jj];
            }
            for jj in 0..dk {
                bk[i * dk + jj] = bc[i] * eg * kc[i * dk + jj];
            }
        }
        gemm(
            n,
            n,
            dv,
            1.0,
            &tinv,
            (n, 1),
            &bv,
            (dv, 1),
            0.0,
            &mut u,
            (dv, 1),
        );
        gemm(
            n,
            n,
            dk,
            1.0,
            &tinv,
            (n, 1),
            &bk,
            (dk, 1),
            0.0,
            &mut w,
            (dk, 1),
        );
        // V_new = U − W S  (stored in u).
        gemm(
            n,
            dk,
            dv,
            -1.0,
            &w,
            (dk, 1),
            state,
            (dv, 1),
            1.0,
            &mut u,
            (dv, 1),
        );
        // O = diag(e^Γ) Q S + (QKᵀ ⊙ D) V_new.
        let oc = &mut out[t0 * dv..(t0 + n) * dv];
        gemm(
            n,
            dk,
            dv,
            1.0,
            qc,
            (dk, 1),
            state,
            (dv, 1),
            0.0,
            oc,
            (dv, 1),
        );
        for i in 0..n {
            let eg = gam[i].exp();
            for x in &mut oc[i * dv..(i + 1) * dv] {
                *x *= eg;
            }
        }
        gemm(n, n, dv, 1.0, &qk, (n, 1), &u, (dv, 1), 1.0, oc, (dv, 1));
        // S = e^{Γ_last} S + (diag(e^{Γ_last − Γ}) K)ᵀ V_new.
        let gl = gam[n - 1];
        for i in 0..n {
            let f = (gl - gam[i]).exp();
            for jj in 0..dk {
                kd[i * dk + jj] = f * kc[i * dk + jj];
            }
        }
        let egl = gl.exp();
        for s in state.iter_mut() {
            *s *= egl;
        }
        gemm(
            dk,
            n,
            dv,
            1.0,
            &kd,
            (1, dk),
            &u,
            (dv, 1),
            1.0,
            state,
            (dv, 1),
        );
        t0 += n;
    }
}

/// Runs the layer on `u` [t, H], continuing from and updating `st`; writes [t, H] to `out`.
/// The projections run on `dev`.
pub fn forward(
    dev: &Device,
    cfg: &ModelConfig,
    w: &GdnWeights,
    u: &[f32],
    t: usize,
    st: &mut LinearState,
    out: &mut [f32],
) -> Result<()> {
    let (hk, hv, dk, dv) = (
        cfg.linear_num_key_heads,
        cfg.linear_num_value_heads,
        cfg.linear_key_head_dim,
        cfg.linear_value_head_dim,
    );
    let (cd, kc, kd) = (cfg.conv_dim(), cfg.linear_conv_kernel_dim, cfg.key_dim());
    let eps = cfg.rms_norm_eps as f32;
    // Projections; the qkv rows go after the Kc−1 carried pre-conv rows.
    let mut xe = vec![0.0; (t + kc - 1) * cd];
    xe[..(kc - 1) * cd].copy_from_slice(&st.conv);
    linear(
        dev,
        u,
        t,
        WeightMat::of(&w.in_proj_qkv),
        &mut xe[(kc - 1) * cd..],
    )?;
    let mut z = vec![0.0; t * hv * dv];
    linear(dev, u, t, WeightMat::of(&w.in_proj_z), &mut z)?;
    let mut b = vec![0.0; t * hv];
    let mut a = vec![0.0; t * hv];
    linear(dev, u, t, WeightMat::of(&w.in_proj_b), &mut b)?;
    linear(dev, u, t, WeightMat::of(&w.in_proj_a), &mut a)?;
    st.conv.copy_from_slice(&xe[t * cd..(t + kc - 1) * cd]);

    // Causal depthwise conv + SiLU, then per-head L2 norm of q (scaled 1/sqrt(dk)) and k.
    let mut cv = vec![0.0; t * cd];
    let qscale = 1.0 / (dk as f32).sqrt();
    cv.par_chunks_mut(cd).enumerate().for_each(|(ti, row)| {
        for (c, r) in row.iter_mut().enumerate() {
            let mut s = 0.0;
            for j in 0..kc {
                s += w.conv_w[c * kc + j] * xe[(ti + j) * cd + c];
            }
            *r = silu(s);
        }
        for h in 0..hk {
            l2norm_scaled(&mut row[h * dk..(h + 1) * dk], 1e-6, qscale);
            l2norm_scaled(&mut row[kd + h * dk..kd + (h + 1) * dk], 1e-6, 1.0);
        }
    });
    drop(xe);

    // Per value head: gather contiguous q/k/v/β/g, run the chunked rule, gated norm.
    let r = hv / hk;
    let heads: Vec<Vec<f32>> = st
        .recurrent
        .par_chunks_mut(dk * dv)
        .enumerate()
        .map(|(h, s)| {
            let kh = h / r;
            let mut qh = vec![0.0; t * dk];
            let mut khv = vec![0.0; t * dk];
            let mut vh = vec![0.0; t * dv];
            let mut beta = vec![0.0; t];
            let mut g = vec![0.0; t];
            for ti in 0..t {
                let row = &cv[ti * cd..(ti + 1) * cd];
                qh[ti * dk..(ti + 1) * dk].copy_from_slice(&row[kh * dk..(kh + 1) * dk]);
                khv[ti * dk..(ti + 1) * dk].copy_from_slice(&row[kd + kh * dk..kd + (kh + 1) * dk]);
                vh[ti * dv..(ti + 1) * dv]
                    .copy_from_slice(&row[2 * kd + h * dv..2 * kd + (h + 1) * dv]);
                beta[ti] = sigmoid(b[ti * hv + h]);
                g[ti] = w.neg_a[h] * softplus(a[ti * hv + h] + w.dt_bias[h]);
            }
            let mut o = vec![0.0; t * dv];
            delta_rule_chunked(&qh, &khv, &vh, &beta, &g, dk, dv, s, &mut o);
            for ti in 0..t {
                let zr = &z[(ti * hv + h) * dv..(ti * hv + h + 1) * dv];
                gated_rmsnorm(&mut o[ti * dv..(ti + 1) * dv], zr, &w.norm, eps);
            }
            o
        })
        .collect();
    let mut y = vec![0.0; t * hv * dv];
    for (h, o) in heads.iter().enumerate() {
        for ti in 0..t {
            y[(ti * hv + h) * dv..(ti * hv + h + 1) * dv]
                .copy_from_slice(&o[ti * dv..(ti + 1) * dv]);
        }
    }
    linear(dev, &y, t, WeightMat::of(&w.out_proj), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> f32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn inputs(t: usize, dk: usize, dv: usize, seed: u64) -> [Vec<f32>; 5] {
        let mut s = seed;
        let mut q: Vec<f32> = (0..t * dk).map(|_| rng(&mut s)).collect();
        let mut k: Vec<f32> = (0..t * dk).map(|_| rng(&mut s)).collect();
        for i in 0..t {
            l2norm_scaled(&mut q[i * dk..(i + 1) * dk], 1e-6, 1.0 / (dk as f32).sqrt());
            l2norm_scaled(&mut k[i * dk..(i + 1) * dk], 1e-6, 1.0);
        }
        let v = (0..t * dv).map(|_| rng(&mut s)).collect();
        let beta = (0..t).map(|_| sigmoid(2.0 * rng(&mut s))).collect();
        // Mix of weak and strong decays, including near-underflow.
        let g = (0..t)
            .map(|i| {
                if i % 17 == 5 {
                    -30.0
                } else {
                    -0.5 * (rng(&mut s) + 1.0)
                }
            })
            .collect();
        [q, k, v, beta, g]
    }

    #[test]
    fn chunked_matches_recurrent_across_lengths_and_split_passes() {
        let (dk, dv) = (16, 8);
        for &t in &[1usize, 5, 63, 64, 65, 150] {
            let [q, k, v, beta, g] = inputs(t, dk, dv, 1234 + t as u64);
            let mut s_ref = vec![0.0; dk * dv];
            let mut o_ref = vec![0.0; t * dv];
            delta_rule_recurrent(&q, &k, &v, &beta, &g, dk, dv, &mut s_ref, &mut o_ref);
            // One pass, then split into two passes at a non-chunk boundary (state carried).
            for split in [t, t / 3] {
                let mut s = vec![0.0; dk * dv];
                let mut o = vec![0.0; t * dv];
                let (a, bnd) = (0..split, split..t);
                for r in [a, bnd] {
                    delta_rule_chunked(
                        &q[r.start * dk..r.end * dk],
                        &k[r.start * dk..r.end * dk],
                        &v[r.start * dv..r.end * dv],
                        &beta[r.clone()],
                        &g[r.clone()],
                        dk,
                        dv,
                        &mut s,
                        &mut o[r.start * dv..r.end * dv],
                    );
                }
                let eo = o
                    .iter()
                    .zip(&o_ref)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                let es = s
                    .iter()
                    .zip(&s_ref)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(
                    eo < 1e-5 && es < 1e-5,
                    "t={t} split={split}: out {eo} state {es}"
                );
            }
        }
    }
}
