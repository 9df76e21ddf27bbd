//! RMSNorm, the norm of every Qwen3.5 residual stream position (the input and post-attention
//! norms of each layer and the final norm): per row of `d` values,
//! `y = x · (rsqrt(mean(x²) + eps) · w)`. Qwen3.5's norms are zero-centred (`1 + w`); the model
//! adds the 1 to the weight once at load, in f32 as the kernel used to (llama.cpp's GGUF files
//! store the weight with the 1 already added).
//!
//! One workgroup per row. Each work-item adds the squares of its elements `lid, lid + 256,
//! ...` in increasing order, then one workgroup tree (`reduce_sum`) combines them; the loops
//! run over uniform chunk counts so the host runs a chunk's work-items side by side.

use loom::{function, kernel};

/// `y = x · (r · w)` on this workgroup's row of `d` values (`x`, `y`: `[rows, d]`; `w`:
/// `[d]`), each work-item on elements `lid, lid + 256, ...`.
#[function]
fn scale_row(y: &mut [f32], x: &[f32], w: &[f32], r: f32, d: u32) {
    for c in 0..(d + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < d {
            y[group_id() * d + c * group_size() + local_id()] = x
                [group_id() * d + c * group_size() + local_id()]
                * (r * w[c * group_size() + local_id()]);
        }
    }
}

/// `x`, `y`: `[rows, d]`; `w`: `[d]`. Grid: x = rows.
#[kernel(name = "norm.rmsnorm", version = 1, workgroup = 256)]
fn rmsnorm(
    x: &[f32; num_groups() * d],
    w: &[f32; d],
    y: &mut [f32; num_groups() * d],
    d: u32,
    eps: f32,
) {
    let mut ss = 0.0;
    for c in 0..(d + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < d {
            let v = x[group_id() * d + c * group_size() + local_id()];
            ss += v * v;
        }
    }
    let r = 1.0 / (reduce_sum(ss) / d as f32 + eps).sqrt();
    scale_row(y, x, w, r, d);
}

/// The residual add fused with the next norm: `x += m`, then `y = rmsnorm(x)`.
/// `x`, `m`, `y`: `[rows, d]`; `w`: `[d]`. Grid: x = rows.
#[kernel(name = "norm.add_rmsnorm", version = 1, workgroup = 256)]
fn add_rmsnorm(
    x: &mut [f32; num_groups() * d],
    m: &[f32; num_groups() * d],
    w: &[f32; d],
    y: &mut [f32; num_groups() * d],
    d: u32,
    eps: f32,
) {
    let mut ss = 0.0;
    for c in 0..(d + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < d {
            let v = x[group_id() * d + c * group_size() + local_id()]
                + m[group_id() * d + c * group_size() + local_id()];
            x[group_id() * d + c * group_size() + local_id()] = v;
            ss += v * v;
        }
    }
    let r = 1.0 / (reduce_sum(ss) / d as f32 + eps).sqrt();
    scale_row(y, x, w, r, d);
}
