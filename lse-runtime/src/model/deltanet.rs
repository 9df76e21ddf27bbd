//! Gated DeltaNet (linear attention) layer: the projections (the LOOM GEMM), then the LOOM
//! kernels of `crate::ops`' DeltaNet ops: causal depthwise conv + SiLU with the L2-normalised
//! q/k, the gates β and g, the chunked gated delta rule (C = 64), the gated RMSNorm; then the
//! output projection. Every step runs on the engine's device.

use super::config::ModelConfig;
use super::error::Result;
use super::kv_cache::LinearState;
use super::linear::{linear, WeightMat};
use super::weights::{Tensor, WeightStore};
use crate::device::Device;
use crate::ops::{self, GdnShape};

/// Eps of the q/k L2 norms (added to the sum of squares), fixed by the model (spec §8.5).
const QK_NORM_EPS: f32 = 1e-6;

/// Weights of one Gated DeltaNet layer.
pub struct GdnWeights {
    in_proj_qkv: Tensor,
    in_proj_z: Tensor,
    in_proj_b: Tensor,
    in_proj_a: Tensor,
    out_proj: Tensor,
    /// [Kc, conv_dim]: the checkpoint's [conv_dim, 1, Kc] transposed, as the conv kernel
    /// reads it.
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    /// Per value head; the decay rate is −exp(A_log).
    a_log: Vec<f32>,
    /// Plain gated-norm weight [dv].
    norm: Vec<f32>,
}

impl GdnWeights {
    /// Loads `{p}linear_attn.*` with shapes checked against `cfg`.
    pub fn load(ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, hv, dv, kc) = (
            cfg.hidden_size,
            cfg.linear_num_value_heads,
            cfg.linear_value_head_dim,
            cfg.linear_conv_kernel_dim,
        );
        let g = |n: &str, s: &[usize]| ws.get(&format!("{p}linear_attn.{n}"), s);
        Ok(GdnWeights {
            in_proj_qkv: g("in_proj_qkv.weight", &[cfg.conv_dim(), h])?,
            in_proj_z: g("in_proj_z.weight", &[cfg.value_dim(), h])?,
            in_proj_b: g("in_proj_b.weight", &[hv, h])?,
            in_proj_a: g("in_proj_a.weight", &[hv, h])?,
            out_proj: g("out_proj.weight", &[h, cfg.value_dim()])?,
            conv_w: transpose(
                &g("conv1d.weight", &[cfg.conv_dim(), 1, kc])?.to_f32_vec(),
                kc,
            ),
            dt_bias: g("dt_bias", &[hv])?.to_f32_vec(),
            a_log: g("A_log", &[hv])?.to_f32_vec(),
            norm: g("norm.weight", &[dv])?.to_f32_vec(),
        })
    }
}

/// `m` (`[rows, cols]`, row-major) transposed to `[cols, rows]`.
fn transpose(m: &[f32], cols: usize) -> Vec<f32> {
    let rows = m.len() / cols;
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| m[r * cols + c]))
        .collect()
}

/// The layer's sizes from the config.
pub fn shape(cfg: &ModelConfig) -> GdnShape {
    GdnShape {
        hk: cfg.linear_num_key_heads,
        hv: cfg.linear_num_value_heads,
        dk: cfg.linear_key_head_dim,
        dv: cfg.linear_value_head_dim,
        kc: cfg.linear_conv_kernel_dim,
    }
}

/// Runs the layer on `u` [t, H], continuing from and updating `st`; writes [t, H] to `out`.
/// Every step runs on `dev`.
pub fn forward(
    dev: &Device,
    cfg: &ModelConfig,
    w: &GdnWeights,
    u: &[f32],
    t: usize,
    st: &mut LinearState,
    out: &mut [f32],
) -> Result<()> {
    let shape = shape(cfg);
    let (hv, cd, vd) = (shape.hv, shape.conv_dim(), shape.value_dim());
    let eps = cfg.rms_norm_eps as f32;
    let mut x = vec![0.0; t * cd];
    linear(dev, u, t, WeightMat::of(&w.in_proj_qkv), &mut x)?;
    let mut z = vec![0.0; t * vd];
    linear(dev, u, t, WeightMat::of(&w.in_proj_z), &mut z)?;
    let mut b = vec![0.0; t * hv];
    let mut a = vec![0.0; t * hv];
    linear(dev, u, t, WeightMat::of(&w.in_proj_b), &mut b)?;
    linear(dev, u, t, WeightMat::of(&w.in_proj_a), &mut a)?;

    let mut qkv = vec![0.0; t * cd];
    let mut conv_state = vec![0.0; st.conv.len()];
    let q_scale = 1.0 / (shape.dk as f32).sqrt();
    ops::deltanet_conv(
        dev,
        &shape,
        &w.conv_w,
        &st.conv,
        &x,
        q_scale,
        QK_NORM_EPS,
        &mut qkv,
        &mut conv_state,
    )?;
    st.conv = conv_state;
    drop(x);
    let mut beta = vec![0.0; t * hv];
    let mut g = vec![0.0; t * hv];
    ops::deltanet_gates(dev, &b, &a, &w.a_log, &w.dt_bias, &mut beta, &mut g)?;
    let mut o = vec![0.0; t * vd];
    ops::delta_rule_chunked(dev, &shape, &qkv, &beta, &g, &mut st.recurrent, &mut o)?;
    let mut y = vec![0.0; t * vd];
    ops::deltanet_gated_norm(dev, hv, &o, &z, &w.norm, eps, &mut y)?;
    linear(dev, &y, t, WeightMat::of(&w.out_proj), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::synthetic::{write_random_model, SyntheticSpec};
    use super::super::HybridLM;
    use crate::ops::MAX_KEY_HEAD_DIM;

    #[test]
    fn loading_refuses_a_key_head_dim_above_the_delta_rule_maximum_naming_config_json() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SyntheticSpec {
            linear_key_head_dim: MAX_KEY_HEAD_DIM + 8,
            ..SyntheticSpec::tiny()
        };
        write_random_model(dir.path(), &spec, 1).unwrap();
        let err = HybridLM::load(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("config.json") && err.contains("linear_key_head_dim 136 is above 128"),
            "{err}"
        );
    }
}
