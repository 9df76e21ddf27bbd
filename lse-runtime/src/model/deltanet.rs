//! Gated DeltaNet (linear attention) layer: the projections (the LOOM GEMM), then the LOOM
//! kernels of `crate::ops`' DeltaNet ops: causal depthwise conv + SiLU with the L2-normalised
//! q/k, the gates β and g, the chunked gated delta rule (C = 64), the gated RMSNorm; then the
//! output projection. Every step runs on the engine's device.

use super::config::ModelConfig;
use super::device_weights::{small, DeviceWeight};
use super::error::Result;
use super::kv_cache::LinearState;
use super::linear::{linear, linear_same_x, WeightMat};
use super::weights::WeightStore;
use crate::device::{DevSlice, DevSliceMut, Device, DeviceBuf};
use crate::ops::{self, GdnShape};

/// Eps of the q/k L2 norms (added to the sum of squares), fixed by the model (spec §8.5).
const QK_NORM_EPS: f32 = 1e-6;

/// Weights of one Gated DeltaNet layer, on the engine's device.
pub struct GdnWeights {
    in_proj_qkv: DeviceWeight,
    in_proj_z: DeviceWeight,
    in_proj_b: DeviceWeight,
    in_proj_a: DeviceWeight,
    out_proj: DeviceWeight,
    /// [Kc, conv_dim]: the checkpoint's [conv_dim, 1, Kc] transposed, as the conv kernel
    /// reads it.
    conv_w: DeviceBuf<f32>,
    dt_bias: DeviceBuf<f32>,
    /// Per value head, the decay rate −exp(A_log).
    rate: DeviceBuf<f32>,
    /// Plain gated-norm weight [dv].
    norm: DeviceBuf<f32>,
}

impl GdnWeights {
    /// Loads `{p}linear_attn.*` onto `dev` with shapes checked against `cfg`.
    pub fn load(dev: &Device, ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let (h, hv, dv, kc) = (
            cfg.hidden_size,
            cfg.linear_num_value_heads,
            cfg.linear_value_head_dim,
            cfg.linear_conv_kernel_dim,
        );
        let g = |n: &str, s: &[usize]| ws.get(&format!("{p}linear_attn.{n}"), s);
        let w = |n: &str, s: &[usize]| DeviceWeight::new(dev, &g(n, s)?);
        let f32s = |n: &str, s: &[usize]| small(dev, &g(n, s)?.to_f32_vec());
        let conv_w = transpose(
            &g("conv1d.weight", &[cfg.conv_dim(), 1, kc])?.to_f32_vec(),
            kc,
        );
        Ok(GdnWeights {
            in_proj_qkv: w("in_proj_qkv.weight", &[cfg.conv_dim(), h])?,
            in_proj_z: w("in_proj_z.weight", &[cfg.value_dim(), h])?,
            in_proj_b: w("in_proj_b.weight", &[hv, h])?,
            in_proj_a: w("in_proj_a.weight", &[hv, h])?,
            out_proj: w("out_proj.weight", &[h, cfg.value_dim()])?,
            conv_w: small(dev, &conv_w)?,
            dt_bias: f32s("dt_bias", &[hv])?,
            rate: small(dev, &ws.decay_rate(p, hv)?)?,
            norm: f32s("norm.weight", &[dv])?,
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
        v_order: cfg.linear_value_head_order,
    }
}

/// Runs the layer on `u` [t, H] (t ≥ 1), continuing from and updating `st`; writes [t, H] to
/// `out`. Every step runs on `dev`, every intermediate in its memory.
pub fn forward(
    dev: &Device,
    cfg: &ModelConfig,
    w: &GdnWeights,
    u: DevSlice<'_, f32>,
    st: &mut LinearState,
    out: DevSliceMut<'_, f32>,
) -> Result<()> {
    let shape = shape(cfg);
    let (hv, cd, vd) = (shape.hv, shape.conv_dim(), shape.value_dim());
    let t = u.len() / cfg.hidden_size;
    let eps = cfg.rms_norm_eps as f32;
    let mut x = dev.scratch::<f32>(t * cd)?;
    let mut z = dev.scratch::<f32>(t * vd)?;
    let mut b = dev.scratch::<f32>(t * hv)?;
    let mut a = dev.scratch::<f32>(t * hv)?;
    linear_same_x(
        dev,
        u,
        vec![
            (WeightMat::of(&w.in_proj_qkv), x.view_mut()),
            (WeightMat::of(&w.in_proj_z), z.view_mut()),
            (WeightMat::of(&w.in_proj_b), b.view_mut()),
            (WeightMat::of(&w.in_proj_a), a.view_mut()),
        ],
    )?;

    let mut qkv = dev.scratch::<f32>(t * cd)?;
    let mut conv_state = dev.alloc(st.conv.len())?;
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
    let mut beta = dev.scratch::<f32>(t * hv)?;
    let mut g = dev.scratch::<f32>(t * hv)?;
    ops::deltanet_gates(dev, &b, &a, &w.rate, &w.dt_bias, &mut beta, &mut g)?;
    let mut o = dev.scratch::<f32>(t * vd)?;
    ops::delta_rule_chunked(dev, &shape, &qkv, &beta, &g, &mut st.recurrent, &mut o)?;
    let mut y = dev.scratch::<f32>(t * vd)?;
    ops::deltanet_gated_norm(dev, hv, &o, &z, &w.norm, eps, &mut y)?;
    linear(dev, y.view(), WeightMat::of(&w.out_proj), out)?;
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
