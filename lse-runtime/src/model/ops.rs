//! Small element-wise and per-row operations in f32 (the DeltaNet's norms and activations)
//! and the RoPE frequencies.

/// Logistic sigmoid.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU: `x·σ(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// Softplus with torch's threshold (identity above 20).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Gated RMSNorm of one head in place: `x/rms(x) · w · silu(z)` (plain weight, not 1+w).
pub fn gated_rmsnorm(x: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
    let d = x.len();
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let r = 1.0 / (ss / d as f32 + eps).sqrt();
    for i in 0..d {
        x[i] = x[i] * r * w[i] * silu(z[i]);
    }
}

/// L2-normalises `x` in place with eps on the sum of squares, then multiplies by `scale`.
pub fn l2norm_scaled(x: &mut [f32], eps: f32, scale: f32) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let r = scale / (ss + eps).sqrt();
    for v in x {
        *v *= r;
    }
}

/// RoPE tables: `inv_freq[i] = θ^(−2i/rot)` for i < rot/2.
pub fn rope_inv_freq(theta: f64, rot: usize) -> Vec<f32> {
    (0..rot / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / rot as f64)) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softplus_is_stable() {
        assert_eq!(softplus(100.0), 100.0);
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-7);
        assert!(softplus(-100.0) >= 0.0);
    }
}
