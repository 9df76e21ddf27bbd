//! Plain-Rust references of the Gated DeltaNet ops, in f64 from the f32 inputs, written
//! from the definitions (`qwen35-spec.md` §8) with none of the kernels' structure: the conv
//! over the concatenated rows `[state | x]`, the gates with `ln_1p`, the per-token
//! recurrence of the delta rule (not the chunked form), and the gated norm.

use lse_runtime::ops::{GdnShape, VHeadOrder};

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The conv + SiLU and q/k norms of one pass: `(out [t, conv_dim], new_state [kc - 1,
/// conv_dim])` for `state` `[kc - 1, conv_dim]`, `x` `[t, conv_dim]`, `w` `[kc, conv_dim]`.
pub fn conv(
    shape: &GdnShape,
    w: &[f32],
    state: &[f32],
    x: &[f32],
    q_scale: f32,
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let (cd, kc) = (shape.conv_dim(), shape.kc);
    let rows: Vec<&[f32]> = state.chunks(cd).chain(x.chunks(cd)).collect();
    let t = x.len() / cd;
    let mut out = vec![0.0f32; t * cd];
    for r in 0..t {
        let conv: Vec<f64> = (0..cd)
            .map(|c| {
                let s: f64 = (0..kc)
                    .map(|j| w[j * cd + c] as f64 * rows[r + j][c] as f64)
                    .sum();
                silu(s)
            })
            .collect();
        let row = &mut out[r * cd..(r + 1) * cd];
        for (o, v) in row.iter_mut().zip(&conv) {
            *o = *v as f32;
        }
        for head in 0..2 * shape.hk {
            let at = head * shape.dk..(head + 1) * shape.dk;
            let ss: f64 = conv[at.clone()].iter().map(|v| v * v).sum();
            let scale = if head < shape.hk { q_scale as f64 } else { 1.0 };
            let r = scale / (ss + eps as f64).sqrt();
            for (o, v) in row[at.clone()].iter_mut().zip(&conv[at]) {
                *o = (v * r) as f32;
            }
        }
    }
    let new_state = rows[t..].concat();
    (out, new_state)
}

/// `softplus(x) = ln(1 + e^x)`, the identity above 20 (torch's threshold).
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The gates: `(beta, g)` with `beta = sigmoid(b)`, `g = rate[h] · softplus(a + dt_bias[h])`
/// (`a + dt_bias` rounded to f32 first, as the kernel adds them), `[t, hv]`.
pub fn gates(b: &[f32], a: &[f32], rate: &[f32], dt_bias: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let hv = rate.len();
    let beta = b
        .iter()
        .map(|&b| (1.0 / (1.0 + (-b as f64).exp())) as f32)
        .collect();
    let g = a
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let h = i % hv;
            (rate[h] as f64 * softplus((a + dt_bias[h]) as f64)) as f32
        })
        .collect();
    (beta, g)
}

/// The gated delta rule by its per-token recurrence (spec §8.6), in f64, continuing from
/// `state` (`[hv, dk, dv]`, updated): for every value head `h` and row in order, with its key
/// head's (`h / (hv / hk)` grouped, `h % hk` tiled) `q` and `k` and `h`'s `v` from the conv
/// rows `qkv`:
/// `S = e^g S; δ = β (v - Sᵀk); S += k δᵀ; o = Sᵀq`. Returns `o` `[t, hv, dv]`.
pub fn delta_rule_recurrent(
    shape: &GdnShape,
    qkv: &[f32],
    beta: &[f32],
    g: &[f32],
    state: &mut [f64],
) -> Vec<f32> {
    let GdnShape { hk, hv, dk, dv, .. } = *shape;
    let cd = shape.conv_dim();
    let t = qkv.len() / cd;
    let mut out = vec![0.0f32; t * hv * dv];
    for h in 0..hv {
        let kh = match shape.v_order {
            VHeadOrder::Grouped => h / (hv / hk),
            VHeadOrder::Tiled => h % hk,
        };
        let s = &mut state[h * dk * dv..(h + 1) * dk * dv];
        for r in 0..t {
            let row = &qkv[r * cd..(r + 1) * cd];
            let q = &row[kh * dk..(kh + 1) * dk];
            let k = &row[(hk + kh) * dk..(hk + kh + 1) * dk];
            let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
            let decay = (g[r * hv + h] as f64).exp();
            s.iter_mut().for_each(|x| *x *= decay);
            let b = beta[r * hv + h] as f64;
            for j in 0..dv {
                let u: f64 = (0..dk).map(|i| s[i * dv + j] * k[i] as f64).sum();
                let delta = b * (v[j] as f64 - u);
                for i in 0..dk {
                    s[i * dv + j] += k[i] as f64 * delta;
                }
                let o: f64 = (0..dk).map(|i| s[i * dv + j] * q[i] as f64).sum();
                out[(r * hv + h) * dv + j] = o as f32;
            }
        }
    }
    out
}

/// The gated RMSNorm: `y = o / sqrt(mean(o²) + eps) · w · silu(z)` per `dv = w.len()` values.
pub fn gated_norm(o: &[f32], z: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let dv = w.len();
    let mut y = vec![0.0f32; o.len()];
    for ((yr, or), zr) in y.chunks_mut(dv).zip(o.chunks(dv)).zip(z.chunks(dv)) {
        let ss: f64 = or.iter().map(|&v| v as f64 * v as f64).sum();
        let r = 1.0 / (ss / dv as f64 + eps as f64).sqrt();
        for j in 0..dv {
            yr[j] = (or[j] as f64 * r * w[j] as f64 * silu(zr[j] as f64)) as f32;
        }
    }
    y
}
