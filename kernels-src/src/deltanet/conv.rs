//! `deltanet.conv.v2`: the causal depthwise conv + SiLU over the q, k and v channels, the
//! L2 norms of q (times `q_scale`) and k per key head, and the conv state the next pass
//! starts from.
//!
//! The conv reads the `kc - 1` carried pre-conv rows (`state`) and the pass's new rows (`x`)
//! in place, without building their concatenation: row `m` of `[state | x]` is
//! `state[m]` for `m < kc - 1` and `x[m - (kc - 1)]` after. One workgroup per (head
//! segment, token): segment `s < 2 hk` is q head `s` (s < hk) or k head `s - hk` (both `dk`
//! channels at `s * dk`), segment `2 hk + h` is v head `h` (`dv` channels at
//! `2 hk dk + h dv`). Segments run fastest, so consecutive workgroups read consecutive
//! channels of the same rows, which the previous token's workgroups brought into the cache
//! (with tokens fastest, each workgroup's rows lay `cd` floats from the last one's, and the
//! loads waited on memory). Each work-item takes channels `lid, lid + 64, ..` of its
//! segment: it writes `silu(conv)`, and for a q or k segment sums the squares in that order;
//! a workgroup reduction gives the sum `ss`, and each work-item rescales the values it wrote
//! by `scale / sqrt(ss + eps)`. The workgroups of token 0 also write the new state, rows
//! `t .. t + kc - 1` of `[state | x]`.

use loom::kernel;

/// `state`: `[kc - 1, cd]`; `x`: `[t, cd]` (the `in_proj_qkv` rows of the pass); `w`:
/// `[kc, cd]`, tap-major so that work-items read consecutive channels (`w[kc - 1, c]`
/// multiplies the current row); `out`: `[t, cd]`; `new_state`:
/// `[kc - 1, cd]`, must not alias `state`. `cd = 2 hk dk + hv dv`; `q_scale` multiplies the
/// normalised q, `eps` is added to the sum of squares. Grid: x = 2 hk + hv, y = t.
#[kernel(name = "deltanet.conv", version = 2, workgroup = 64)]
fn conv(
    state: &[f32; (kc - 1) * cd],
    x: &[f32; t * cd],
    w: &[f32; kc * cd],
    out: &mut [f32; t * cd],
    new_state: &mut [f32; (kc - 1) * cd],
    t: u32,
    cd: u32,
    kc: u32,
    hk: u32,
    dk: u32,
    dv: u32,
    q_scale: f32,
    eps: f32,
) {
    // Segment bounds are written out in each region that uses them (the reduction splits
    // the kernel in two), so they stay uniform in the host code.
    let norm = group_id() < 2 * hk;
    let width = if norm { dk } else { dv };
    let first = if norm {
        group_id() * dk
    } else {
        2 * hk * dk + (group_id() - 2 * hk) * dv
    };
    let mut ss = 0.0;
    for c0 in (0..width).step_by(group_size()) {
        if c0 + local_id() < width {
            let c = first + c0 + local_id();
            let mut s = 0.0;
            for j in 0..kc {
                let xv = if group_id_y() + j < kc - 1 {
                    state[(group_id_y() + j) * cd + c]
                } else {
                    x[(group_id_y() + j - (kc - 1)) * cd + c]
                };
                s = fma(w[j * cd + c], xv, s);
            }
            let y = silu(s);
            out[group_id_y() * cd + c] = y;
            ss = fma(y, y, ss);
        }
    }
    if group_id() < 2 * hk {
        let total = reduce_sum(ss);
        let scale = if group_id() < hk { q_scale } else { 1.0 };
        let r = scale / sqrt(total + eps);
        for c0 in (0..dk).step_by(group_size()) {
            if c0 + local_id() < dk {
                out[group_id_y() * cd + group_id() * dk + c0 + local_id()] *= r;
            }
        }
    }
    if group_id_y() == 0 {
        let width = if group_id() < 2 * hk { dk } else { dv };
        let first = if group_id() < 2 * hk {
            group_id() * dk
        } else {
            2 * hk * dk + (group_id() - 2 * hk) * dv
        };
        for i in 0..kc - 1 {
            for c0 in (0..width).step_by(group_size()) {
                if c0 + local_id() < width {
                    let c = first + c0 + local_id();
                    new_state[i * cd + c] = if t + i < kc - 1 {
                        state[(t + i) * cd + c]
                    } else {
                        x[(t + i - (kc - 1)) * cd + c]
                    };
                }
            }
        }
    }
}
