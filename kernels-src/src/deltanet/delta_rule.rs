//! `deltanet.delta_rule.v3`: the chunked gated delta rule (`qwen35-spec.md` §8.7, chunks of
//! 64 tokens), continuing from and updating the recurrent state of every value head, from
//! the per-chunk matrices [`super::delta_prep`] formed.
//!
//! The value columns of a head's state `S` (`[dk, dv]`) evolve independently, so one
//! workgroup takes one value head and a block of 64 value columns, one work-item per column,
//! and keeps that block of `S` in shared memory for the whole pass; no work-item reads
//! another's column, so the kernel has no barrier. Per chunk of `n <= 64` rows (the last one
//! may be short; nothing is padded), with `M`, `e^Γ` and `e^(Γ_last - Γ)` from the prep:
//!
//! 1. Per row `i` in order, per column: `R_i = β_i (v_i - e^Γ_i k_i · S)`, the forward
//!    substitution `V_new_i = R_i - Σ_{j<i} L_ij V_new_j` (this solves `(I + L) V_new = R`,
//!    i.e. `V_new = U - W S` with `U = T diag(β) V`, `W = T diag(β e^Γ) K`, `T = (I + L)^-1`,
//!    without forming `T` or `W`), then `O_i = e^Γ_i q_i · S + Σ_{j<=i} M[j, i] V_new_j`.
//! 2. `S = e^Γ_last S + Σ_i e^(Γ_last - Γ_i) k_i V_new_iᵀ`.
//!
//! `q`, `k` and `v` are read in place from the conv output rows. Every accumulation is a
//! chain of `fma` in increasing index order, so the host code and the generated Rust agree
//! bit for bit. Shared memory: `128 * 64 + 64 * 64` floats = 48 KiB (the most static shared memory
//! an NVIDIA block may have). 64 columns, not fewer: the host runs a workgroup's work-items
//! side by side, so each `fma` chain over `dk` or over the chunk's rows has four vectors in
//! flight, twice what 32 columns give (the chains are latency-bound).

use loom::kernel;

/// `qkv`: `[t, cd]` conv output rows `[q: hk dk | k: hk dk | v: hv dv]`, q and k normalised;
/// `beta`: `[t, hv]`; `mats`, `decay`: [`super::delta_prep`]'s for the same rows; `state`:
/// `[hv, dk, dv]`, read and updated; `out`: `[t, hv, dv]`. `dk <= 128`. Grid: x = ceil(dv /
/// 64), y = hv / hk, z = hk; the workgroup's key head is `z` and its value head
/// `h = z * (hv / hk) + y` when `tiled` is 0 (Hugging Face's grouped order: value head `h`
/// reads key head `h / (hv / hk)`), else `h = y * hk + z` (llama.cpp's tiled order, which its
/// GGUF converter writes: value head `h` reads key head `h % hk`).
#[kernel(name = "deltanet.delta_rule", version = 3, workgroup = 64)]
fn delta_rule(
    qkv: &[f32; t * cd],
    beta: &[f32; t * num_groups_y() * num_groups_z()],
    mats: &[f32; num_groups_y() * num_groups_z() * ((t + 63) / 64) * 64 * 64],
    decay: &[f32; num_groups_y() * num_groups_z() * ((t + 63) / 64) * 2 * 64],
    state: &mut [f32; num_groups_y() * num_groups_z() * dk * dv],
    out: &mut [f32; t * num_groups_y() * num_groups_z() * dv],
    t: u32,
    cd: u32,
    dk: u32,
    dv: u32,
    tiled: u32,
) {
    // Chunk length, value columns per workgroup (the workgroup size), largest dk.
    const CH: u32 = 64;
    const DVB: u32 = 64;
    const MAX_DK: u32 = 128;
    let s = shared::<f32>(MAX_DK * DVB);
    let vn = shared::<f32>(CH * DVB);
    let hk = num_groups_z();
    let hv = num_groups_y() * num_groups_z();
    let h = if tiled == 0 {
        group_id_z() * num_groups_y() + group_id_y()
    } else {
        group_id_y() * num_groups_z() + group_id_z()
    };
    let kq = group_id_z() * dk;
    let kk = (num_groups_z() + group_id_z()) * dk;
    let c = group_id() * DVB + local_id();
    for d in 0..dk {
        s[d * DVB + local_id()] = if c < dv {
            state[(h * dk + d) * dv + c]
        } else {
            0.0
        };
    }
    for c0 in (0..t).step_by(CH) {
        let n = min(CH, t - c0);
        // This chunk's M and decays.
        let mb = (h * ((t + CH - 1) / CH) + c0 / CH) * CH * CH;
        let db = (h * ((t + CH - 1) / CH) + c0 / CH) * 2 * CH;
        for i in 0..n {
            let mut ks = 0.0;
            let mut qs = 0.0;
            for d in 0..dk {
                ks = fma(qkv[(c0 + i) * cd + kk + d], s[d * DVB + local_id()], ks);
                qs = fma(qkv[(c0 + i) * cd + kq + d], s[d * DVB + local_id()], qs);
            }
            let v = if c < dv {
                qkv[(c0 + i) * cd + 2 * hk * dk + h * dv + c]
            } else {
                0.0
            };
            let mut r = beta[(c0 + i) * hv + h] * (v - decay[db + i] * ks);
            for j in 0..i {
                r = fma(-mats[mb + i * CH + j], vn[j * DVB + local_id()], r);
            }
            vn[i * DVB + local_id()] = r;
            let mut o = decay[db + i] * qs;
            for j in 0..i + 1 {
                o = fma(mats[mb + j * CH + i], vn[j * DVB + local_id()], o);
            }
            if c < dv {
                out[((c0 + i) * hv + h) * dv + c] = o;
            }
        }
        // Two rows of `S` per pass (with an odd `dk` the last pass computes its last row
        // twice): their chains over the chunk's rows are independent, and one alone waited on
        // each `fma`'s latency.
        for d in (0..dk).step_by(2) {
            let e = min(d + 1, dk - 1);
            let mut x = decay[db + n - 1] * s[d * DVB + local_id()];
            let mut y = decay[db + n - 1] * s[e * DVB + local_id()];
            for i in 0..n {
                let w = decay[db + CH + i];
                let u = vn[i * DVB + local_id()];
                x = fma(w * qkv[(c0 + i) * cd + kk + d], u, x);
                y = fma(w * qkv[(c0 + i) * cd + kk + e], u, y);
            }
            s[d * DVB + local_id()] = x;
            s[e * DVB + local_id()] = y;
        }
    }
    for d in 0..dk {
        if c < dv {
            state[(h * dk + d) * dv + c] = s[d * DVB + local_id()];
        }
    }
}
