//! `deltanet.conv.v1`: the causal depthwise conv + SiLU over the q, k and v channels, the
//! L2 norms of q (times `q_scale`) and k per key head, and the conv state the next pass
//! starts from.
//!
//! The conv reads the `kc - 1` carried pre-conv rows (`state`) and the pass's new rows (`x`)
//! in place, without building their concatenation: row `m` of `[state | x]` is
//! `state[m]` for `m < kc - 1` and `x[m - (kc - 1)]` after. One workgroup per (token, head
//! segment): segment `y < 2 hk` is q head `y` (y < hk) or k head `y - hk` (both `dk` channels
//! at `y * dk`), segment `2 hk + h` is v head `h` (`dv` channels at `2 hk dk + h dv`). Each
//! work-item takes channels `lid, lid + 64, ..` of its segment: it writes `silu(conv)`, and
//! for a q or k segment sums the squares in that order; a workgroup reduction gives the sum
//! `ss`, and each work-item rescales the values it wrote by `scale / sqrt(ss + eps)`. The
//! workgroups of token 0 also write the new state, rows `t .. t + kc - 1` of `[state | x]`.

use loom::kernel;

/// `state`: `[kc - 1, cd]`; `x`: `[t, cd]` (the `in_proj_qkv` rows of the pass); `w`:
/// `[cd, kc]` (`w[c, kc - 1]` multiplies the current row); `out`: `[t, cd]`; `new_state`:
/// `[kc - 1, cd]`, must not alias `state`. `cd = 2 hk dk + hv dv`; `q_scale` multiplies the
/// normalised q, `eps` is added to the sum of squares. Grid: x = t, y = 2 hk + hv.
#[kernel(name = "deltanet.conv", version = 1, workgroup = 64)]
fn conv(
    state: &[f32],
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    new_state: &mut [f32],
    t: u32,
    cd: u32,
    kc: u32,
    hk: u32,
    dk: u32,
    dv: u32,
    q_scale: f32,
    eps: f32,
) {
    let seg = group_id_y();
    let norm = seg < 2 * hk;
    let width = if norm { dk } else { dv };
    let first = if norm {
        seg * dk
    } else {
        2 * hk * dk + (seg - 2 * hk) * dv
    };
    let row = group_id();
    let mut ss = 0.0;
    for c0 in (0..width).step_by(group_size()) {
        if c0 + local_id() < width {
            let c = first + c0 + local_id();
            let mut s = 0.0;
            for j in 0..kc {
                let m = row + j;
                let xv = if m < kc - 1 {
                    state[m * cd + c]
                } else {
                    x[(m - (kc - 1)) * cd + c]
                };
                s = fma(w[c * kc + j], xv, s);
            }
            let y = silu(s);
            out[row * cd + c] = y;
            ss = fma(y, y, ss);
        }
    }
    if norm {
        let total = reduce_sum(ss);
        let scale = if seg < hk { q_scale } else { 1.0 };
        let r = scale / sqrt(total + eps);
        for c0 in (0..width).step_by(group_size()) {
            if c0 + local_id() < width {
                out[row * cd + first + c0 + local_id()] *= r;
            }
        }
    }
    if row == 0 {
        for i in 0..kc - 1 {
            for c0 in (0..width).step_by(group_size()) {
                if c0 + local_id() < width {
                    let c = first + c0 + local_id();
                    let m = t + i;
                    new_state[i * cd + c] = if m < kc - 1 {
                        state[m * cd + c]
                    } else {
                        x[(m - (kc - 1)) * cd + c]
                    };
                }
            }
        }
    }
}
