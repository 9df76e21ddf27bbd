//! f64 references of the residual stream's and the attention layer's elementwise steps: the
//! RMSNorm, NeoX RoPE and the sigmoid output gate. Each takes f32 inputs and
//! computes in f64, so it is independent of the kernels' summation order.

/// RMSNorm of one row: `x · rsqrt(mean(x²) + eps) · w`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let r = 1.0 / (ss / x.len() as f64 + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &wi)| v as f64 * r * wi as f64)
        .collect()
}

/// Rotates the first `2 · inv_freq.len()` values of one head at position `pos` in place
/// (pairs `(i, i + half)`), the angle formed in f32 as transformers does and its sine and
/// cosine taken in f64.
pub fn rope_neox(x: &mut [f64], inv_freq: &[f32], pos: usize) {
    let half = inv_freq.len();
    for (i, &f) in inv_freq.iter().enumerate() {
        let ang = (pos as f32 * f) as f64;
        let (s, c) = ang.sin_cos();
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/// The logistic sigmoid.
pub fn sigmoid(x: f32) -> f64 {
    1.0 / (1.0 + (-(x as f64)).exp())
}
