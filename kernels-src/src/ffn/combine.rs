//! `ffn.moe_combine.v2`: the MoE block's output per token, the sigmoid-gated shared expert
//! plus the routed experts weighted by the router:
//! `out[t, :] = sigmoid(shared_gate[t]) · shared[t, :] + Σ_j weights[t, j] · ys[slots[t, j], :]`.
//!
//! Order of operations per element: `acc = sigmoid(g) · shared`, then `acc += w_j · y_j` for
//! `j = 0, 1, ..., k - 1` in the router's order (largest weight first), each a product then
//! a sum (two roundings). One work-item owns each output element, so there are no races and
//! no atomics, and the result does not depend on how the work is scheduled.
//!
//! v2 reads each routed expert's weight and row once per step `j`, before the bounds check
//! `i < h`: v1 read them inside it, where the host code loaded them per work-item (gathers of
//! one address) and read the expert's row through a gather. The same operations in the same
//! order, so the same bits.

use loom::kernel;

/// `shared`: `[tokens, h]` (the shared expert's output); `shared_gate`: `[tokens]` (its
/// gate's logit); `weights`, `slots`: `[tokens, k]` (the router's weights, and the row of
/// `ys` holding each routed expert's output for the token, each `< n_slots`); `ys`:
/// `[n_slots, h]`; `out`: `[tokens, h]`. One workgroup per token; work-items stride over the
/// row. Grid: x = tokens.
#[kernel(name = "ffn.moe_combine", version = 2, workgroup = 256)]
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
        let mut acc = 0.0;
        if i < h {
            acc = g * shared[t * h + i];
        }
        for j in 0..k {
            let weight = weights[t * k + j];
            let row = slots[t * k + j] * h;
            if i < h {
                acc += weight * ys[row + i];
            }
        }
        if i < h {
            out[t * h + i] = acc;
        }
    }
}
