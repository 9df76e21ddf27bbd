//! `deltanet.gated_norm.v2`: the DeltaNet output norm, `y = o / rms(o) · w · silu(z)` per
//! (token, value head) over the `dv` values (`qwen35-spec.md` §5, "Gated RMSNorm"), written
//! straight into the `[t, hv * dv]` rows `out_proj` takes.
//!
//! One workgroup per (head, token), heads fastest so that consecutive workgroups read
//! consecutive rows (`deltanet.conv` says why); work-item `lid` takes values `lid, lid + 64,
//! ..` and sums their squares in that order, a workgroup reduction gives the sum of squares,
//! then each work-item writes its values as `((o · r) · w) · silu(z)` with
//! `r = 1 / sqrt(ss / dv + eps)`.

use loom::kernel;

/// `o`, `z`, `y`: `[t, hv, dv]`; `w`: `[dv]`. Grid: x = hv, y = t.
#[kernel(name = "deltanet.gated_norm", version = 2, workgroup = 64)]
fn gated_norm(
    o: &[f32; num_groups() * num_groups_y() * dv],
    z: &[f32; num_groups() * num_groups_y() * dv],
    w: &[f32; dv],
    y: &mut [f32; num_groups() * num_groups_y() * dv],
    dv: u32,
    eps: f32,
) {
    let mut ss = 0.0;
    for c0 in (0..dv).step_by(group_size()) {
        if c0 + local_id() < dv {
            let x = o[(group_id_y() * num_groups() + group_id()) * dv + c0 + local_id()];
            ss = fma(x, x, ss);
        }
    }
    let total = reduce_sum(ss);
    let r = 1.0 / sqrt(total / dv as f32 + eps);
    for c0 in (0..dv).step_by(group_size()) {
        if c0 + local_id() < dv {
            let at = (group_id_y() * num_groups() + group_id()) * dv + c0 + local_id();
            y[at] = o[at] * r * w[c0 + local_id()] * silu(z[at]);
        }
    }
}
