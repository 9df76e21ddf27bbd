//! `deltanet.gates.v2`: the per-token, per-value-head scalars of the gated delta rule,
//! `β = sigmoid(b)` and the log decay `g = A · softplus(a + dt_bias)`, with the decay rate
//! `A = -exp(A_log)` formed once at load (llama.cpp's GGUF files store it so, as `ssm_a`).
//!
//! Softplus follows torch's threshold (the identity above 20); below it, `ln(1 + e^x)` is
//! taken as `ln(u) · e^x / (u - 1)` with `u = 1 + e^x` rounded (Goldberg's `log1p`), which
//! stays accurate to a few ulp where `e^x` is far below 1 and `ln(u)` alone would round to
//! 0; where `u` rounds to exactly 1, `ln(1 + e^x) = e^x` to f32 precision.

use loom::kernel;

/// `b`, `a`, `beta`, `g`: `[n / hv, hv]` (token-major); `rate` (`A`), `dt_bias`: `[hv]`. One
/// work-item per element; grid x = ceil(n / 256).
#[kernel(name = "deltanet.gates", version = 2, workgroup = 256)]
fn gates(
    b: &[f32; n],
    a: &[f32; n],
    rate: &[f32; hv],
    dt_bias: &[f32; hv],
    beta: &mut [f32; n],
    g: &mut [f32; n],
    n: u32,
    hv: u32,
) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        let h = i % hv;
        beta[i] = sigmoid(b[i]);
        let x = a[i] + dt_bias[h];
        let e = exp(x);
        let u = 1.0 + e;
        let softplus = if x > 20.0 {
            x
        } else if u == 1.0 {
            e
        } else {
            log(u) * (e / (u - 1.0))
        };
        g[i] = rate[h] * softplus;
    }
}
