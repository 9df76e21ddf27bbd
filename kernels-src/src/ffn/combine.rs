//! `ffn.moe_combine.v1`: the MoE block's output per token, the sigmoid-gated shared expert
//! plus the routed experts weighted by the router:
//! `out[t, :] = sigmoid(shared_gate[t]) · shared[t, :] + Σ_j weights[t, j] · ys[slots[t, j], :]`.
//!
//! Order of operations per element: `acc = sigmoid(g) · shared`, then `acc += w_j · y_j` for
//! `j = 0, 1, ..., k - 1` in the router's order (largest weight first), each a product then
//! a sum (two roundings). One work-item owns each output element, so there are no races and
//! no atomics, and the result does not depend on how the work is scheduled.

use loom::kernel;

/// `shared`: `[tokens, h]` (the shared expert's output); `shared_gate`: `[tokens]` (its
/// gate's logit); `weights`, `slots`: `[tokens, k]` (the router's weights, and the row of
/// `ys` holding each routed expert's output for the token, each `< n_slots`); `ys`:
/// `[n_slots, h]`; `out`: `[tokens, h]`. One workgroup per token; work-items stride over the
/// row. Grid: x = tokens.
#[kernel(name = "ffn.moe_combine", version = 1, workgroup = 256)]
fn moe_combine(
    shared: &[f32; num_groups() * h],
    shared_gate: &[f32; num_groups()],
    weights: &[f32; num_groups() * k],
    slots: &[u32; num_groups() * k],
    ys: &[f32; num_groups() * k * h],
    out: &mut [f32; num_groups() * h],
    h: u32,
    k: u32,
) {
    const WG: u32 = 256;
    let t = group_id();
    let g = sigmoid(shared_gate[t]);
    for c in 0..(h + WG - 1) / WG {
        let i = c * WG + local_id();
        if i < h {
            let mut acc = g * shared[t * h + i];
            for j in 0..k {
                acc += weights[t * k + j] * ys[slots[t * k + j] * h + i];
            }
            out[t * h + i] = acc;
        }
    }
}
