//! Plain-Rust references of the feed-forward kernels: the element-wise and routing code the
//! model ran before its LOOM kernels (`lse-runtime/src/model/ffn.rs`), with `std`'s `exp`.

/// Logistic sigmoid, `1 / (1 + exp(-x))`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU, `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// SwiGLU's element-wise step: `a[i] = silu(a[i]) · b[i]`.
pub fn swiglu(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = silu(*x) * y;
    }
}

/// The router of every token of `logits` (`[tokens, num_experts]`): softmax in f32 (maximum,
/// `exp`, a sum in increasing expert id, division), the `k` largest probabilities (a sort,
/// ties to the lower id), renormalised by their sum taken largest first. Returns `ids` and
/// `weights`, `[tokens, k]` each, best first.
pub fn moe_router(logits: &[f32], num_experts: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ids = Vec::new();
    let mut weights = Vec::new();
    let mut order: Vec<usize> = (0..num_experts).collect();
    for row in logits.chunks(num_experts) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut p: Vec<f32> = row.iter().map(|&v| (v - m).exp()).collect();
        let s: f32 = p.iter().sum();
        for v in &mut p {
            *v /= s;
        }
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let top: f32 = order[..k].iter().map(|&e| p[e]).sum();
        ids.extend(order[..k].iter().map(|&e| e as u32));
        weights.extend(order[..k].iter().map(|&e| p[e] / top));
    }
    (ids, weights)
}

/// Per expert, the tokens routed to it (increasing) and their weights, from a routing's `ids`
/// and `weights` (`[tokens, k]`).
pub fn routed_by_expert(
    ids: &[u32],
    weights: &[f32],
    num_experts: usize,
    k: usize,
) -> Vec<Vec<(usize, f32)>> {
    let mut routed = vec![Vec::new(); num_experts];
    for (i, (&e, &w)) in ids.iter().zip(weights).enumerate() {
        routed[e as usize].push((i / k, w));
    }
    routed
}

/// The MoE block's output as the model formed it before the combine kernel: `out =
/// sigmoid(shared_gate[t]) · shared[t, :]`, then for each expert in increasing id and each of
/// its tokens, `out[t, :] += w · y` with `y = expert_out(e, t)` (the expert's output row for
/// the token).
pub fn moe_combine<'a>(
    shared: &[f32],
    shared_gate: &[f32],
    h: usize,
    routed: &[Vec<(usize, f32)>],
    expert_out: impl Fn(usize, usize) -> &'a [f32],
) -> Vec<f32> {
    let mut out = shared.to_vec();
    for (row, &g) in out.chunks_mut(h).zip(shared_gate) {
        let s = sigmoid(g);
        for v in row {
            *v *= s;
        }
    }
    for (e, toks) in routed.iter().enumerate() {
        for &(t, w) in toks {
            for (o, y) in out[t * h..(t + 1) * h].iter_mut().zip(expert_out(e, t)) {
                *o += w * y;
            }
        }
    }
    out
}

/// `y = x · wᵀ` for `x` `[m, k]` and `w` `[n, k]`, each dot in f64 and rounded once.
pub fn matmul_xwt(x: &[f32], w: &[f32], k: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len() / k * (w.len() / k));
    for xr in x.chunks(k) {
        for wr in w.chunks(k) {
            let dot: f64 = xr
                .iter()
                .zip(wr)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            y.push(dot as f32);
        }
    }
    y
}

/// A SwiGLU MLP `down(silu(x · gateᵀ) ⊙ (x · upᵀ))` on the rows of `x` (`[m, h]`), with
/// `gate`, `up` `[i, h]` and `down` `[h, i]`.
pub fn swiglu_mlp(x: &[f32], h: usize, gate: &[f32], up: &[f32], down: &[f32]) -> Vec<f32> {
    let i = gate.len() / h;
    let mut a = matmul_xwt(x, gate, h);
    let b = matmul_xwt(x, up, h);
    swiglu(&mut a, &b);
    matmul_xwt(&a, down, i)
}
