//! `deltanet.conv.v3`: the causal depthwise conv + SiLU over the q, k and v channels, the
//! L2 norms of q (times `q_scale`) and k per key head, and the conv state the next pass
//! starts from.
//!
//! The conv reads the `kc - 1` carried pre-conv rows (`state`) and the pass's new rows (`x`)
//! in place, without building their concatenation: row `m` of `[state | x]` is
//! `state[m]` for `m < kc - 1` and `x[m - (kc - 1)]` after. One workgroup per (head
//! segment, run of 8 tokens), the tokens in turn: segment `s < 2 hk` is q head `s` (s < hk)
//! or k head `s - hk` (both `dk` channels at `s * dk`), segment `2 hk + h` is v head `h` (`dv`
//! channels at `2 hk dk + h dv`). Segments run fastest, so consecutive workgroups read
//! consecutive channels of the same rows, which the previous workgroups brought into the
//! cache (with tokens fastest, each workgroup's rows lay `cd` floats from the last one's, and
//! the loads waited on memory); a token's rows are read again by its next 3 in the same
//! workgroup. Each work-item takes channels `lid, lid + 64, ..` of its segment: it writes
//! `silu(conv)`, and for a q or k segment sums the squares in that order; a workgroup
//! reduction gives the sum `ss`, and each work-item rescales the values it wrote by `scale /
//! sqrt(ss + eps)`. The first workgroups also write the new state, rows `t .. t + kc - 1` of
//! `[state | x]`. v3 (8 tokens per workgroup, v2 took one): 2.4 times faster on the host (the
//! per-workgroup work of one token was too small to pay for the workgroup), same values.

use loom::kernel;

/// `state`: `[kc - 1, cd]`; `x`: `[t, cd]` (the `in_proj_qkv` rows of the pass); `w`:
/// `[kc, cd]`, tap-major so that work-items read consecutive channels (`w[kc - 1, c]`
/// multiplies the current row); `out`: `[t, cd]`; `new_state`:
/// `[kc - 1, cd]`, must not alias `state`. `cd = 2 hk dk + hv dv`; `q_scale` multiplies the
/// normalised q, `eps` is added to the sum of squares. Grid: x = 2 hk + hv, y = ceil(t / 8).
#[kernel(name = "deltanet.conv", version = 3, workgroup = 64)]
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
    // Tokens per workgroup (grid y takes ceil(t / TOKENS)).
    const TOKENS: u32 = 8;
    let norm = group_id() < 2 * hk;
    let width = if norm { dk } else { dv };
    let first = if norm {
        group_id() * dk
    } else {
        2 * hk * dk + (group_id() - 2 * hk) * dv
    };
    for tt in 0..TOKENS {
        let tok = group_id_y() * TOKENS + tt;
        if tok < t {
            let mut ss = 0.0;
            for c0 in (0..width).step_by(group_size()) {
                if c0 + local_id() < width {
                    let c = first + c0 + local_id();
                    let mut s = 0.0;
                    for j in 0..kc {
                        let xv = if tok + j < kc - 1 {
                            state[(tok + j) * cd + c]
                        } else {
                            x[(tok + j - (kc - 1)) * cd + c]
                        };
                        s = fma(w[j * cd + c], xv, s);
                    }
                    let y = silu(s);
                    out[tok * cd + c] = y;
                    ss = fma(y, y, ss);
                }
            }
            if norm {
                let total = reduce_sum(ss);
                let scale = if group_id() < hk { q_scale } else { 1.0 };
                let r = scale / sqrt(total + eps);
                for c0 in (0..dk).step_by(group_size()) {
                    if c0 + local_id() < dk {
                        out[tok * cd + first + c0 + local_id()] *= r;
                    }
                }
            }
        }
    }
    if group_id_y() == 0 {
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
