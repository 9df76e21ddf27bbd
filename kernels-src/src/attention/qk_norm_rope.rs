//! `attention.qk_norm_rope`: the per-head RMSNorm of queries or keys followed by
//! partial NeoX (rotate-half) RoPE, as Qwen3.5's full-attention layers apply them.
//!
//! Each head of `head_dim` values is normalised, `n = x · (rsqrt(mean(x²) + eps) · w)` (the
//! model adds the 1 of Qwen3.5's zero-centred norm weight at load, as for `norm.rmsnorm`);
//! then its first `2 · half` dimensions are rotated in pairs `(i, i + half)` by the angle of
//! the token's position and frequency `i`: `n_i cos - n_{i+half} sin` and
//! `n_{i+half} cos + n_i sin`; the rest pass through. The cosines and sines come from a table
//! the op builds once per pass (`[t, 2 · half]`: the `half` cosines then the `half` sines of
//! each token), since the angles need `sin` and `cos` of f32 arguments up to the context
//! length, which LOOM does not define.
//!
//! The source is read with strides, so the queries come straight out of the interleaved
//! `[q | gate]` rows of the q projection and the keys out of the k projection.

use loom::kernel;

/// `src`: head `h` of token `tok` at `tok * src_row + h * src_head`; `w`: `[head_dim]`;
/// `cos_sin`: `[t, 2 * half]`; `dst`: `[t, heads, head_dim]`. Grid: x = heads, y = t.
#[kernel(name = "attention.qk_norm_rope", version = 2, workgroup = 64)]
fn qk_norm_rope(
    src: &[f32; num_groups_y() * src_row],
    w: &[f32; head_dim],
    cos_sin: &[f32; num_groups_y() * 2 * half],
    dst: &mut [f32; num_groups_y() * num_groups() * head_dim],
    src_row: u32,
    src_head: u32,
    head_dim: u32,
    half: u32,
    eps: f32,
) {
    let mut ss = 0.0;
    for c in 0..(head_dim + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < head_dim {
            let v =
                src[group_id_y() * src_row + group_id() * src_head + c * group_size() + local_id()];
            ss += v * v;
        }
    }
    let r = 1.0 / (reduce_sum(ss) / head_dim as f32 + eps).sqrt();
    for c in 0..(head_dim + group_size() - 1) / group_size() {
        let d = c * group_size() + local_id();
        if d < head_dim {
            let base = group_id_y() * src_row + group_id() * src_head;
            let n = src[base + d] * (r * w[d]);
            let mut out = n;
            if d < half {
                let pair = src[base + d + half] * (r * w[d + half]);
                let cs = group_id_y() * 2 * half + d;
                out = n * cos_sin[cs] - pair * cos_sin[cs + half];
            } else if d < 2 * half {
                let pair = src[base + d - half] * (r * w[d - half]);
                let cs = group_id_y() * 2 * half + d - half;
                out = n * cos_sin[cs] + pair * cos_sin[cs + half];
            }
            dst[(group_id_y() * num_groups() + group_id()) * head_dim + d] = out;
        }
    }
}
