//! Small element-wise and per-row operations in f32 (norms, activations, RoPE).

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

/// Zero-centred RMSNorm in place over each row of width `w.len()`: `x·rsqrt(mean(x²)+eps)·(1+w)`.
pub fn rmsnorm_zc_rows(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    for row in x.chunks_exact_mut(d) {
        let ss: f32 = row.iter().map(|v| v * v).sum();
        let r = 1.0 / (ss / d as f32 + eps).sqrt();
        for (v, wi) in row.iter_mut().zip(w) {
            *v *= r * (1.0 + wi);
        }
    }
}

/// Zero-centred RMSNorm from `x` into `out` (rows of width `w.len()`).
pub fn rmsnorm_zc_into(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    out[..x.len()].copy_from_slice(x);
    rmsnorm_zc_rows(&mut out[..x.len()], w, eps);
}

/// RoPE tables: `inv_freq[i] = θ^(−2i/rot)` for i < rot/2.
pub fn rope_inv_freq(theta: f64, rot: usize) -> Vec<f32> {
    (0..rot / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / rot as f64)) as f32)
        .collect()
}

/// Applies NeoX-style (rotate-half) RoPE to the first `2·inv_freq.len()` dims of one head at
/// absolute position `pos`. Angles are formed in f32 as transformers does.
pub fn rope_neox(x: &mut [f32], inv_freq: &[f32], pos: usize) {
    let half = inv_freq.len();
    for (i, f) in inv_freq.iter().enumerate() {
        let ang = pos as f32 * f;
        let (s, c) = ang.sin_cos();
        let a = x[i];
        let b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmsnorm_zero_weight_gives_unit_rms() {
        let mut x = vec![3.0, -4.0, 0.0, 1.0];
        rmsnorm_zc_rows(&mut x, &[0.0; 4], 0.0);
        let ms: f32 = x.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs_i_and_i_plus_half_only() {
        let inv = rope_inv_freq(10000.0, 4);
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 5.0, 6.0];
        rope_neox(&mut x, &inv, 1);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[2] - 1f32.sin()).abs() < 1e-6);
        assert_eq!(&x[4..], &[5.0, 6.0]);
        // Norm preserved.
        let n: f32 = x[..4].iter().map(|v| v * v).sum();
        assert!((n - 1.0).abs() < 1e-6);
    }
}
