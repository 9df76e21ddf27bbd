//! `deltanet.delta_rule.v1`: the chunked gated delta rule (`qwen35-spec.md` §8.7, chunks of
//! 64 tokens), continuing from and updating the recurrent state of every value head.
//!
//! The value columns of a head's state `S` (`[dk, dv]`) evolve independently, so one
//! workgroup takes one value head and a block of 32 value columns, one work-item per column,
//! and keeps that block of `S` in shared memory for the whole pass. Per chunk of `n <= 64`
//! rows (the last one may be short; nothing is padded), with `Γ` the cumulative sum of the
//! chunk's `g` and `D_ij = exp(Γ_i - Γ_j)`:
//!
//! 1. `Γ`, `e^Γ`, `e^(Γ_last - Γ)`, and one 64 x 64 matrix `M` holding in its strict lower
//!    triangle `L_ij = β_i (k_i · k_j) D_ij` (j < i) and in its upper triangle and diagonal
//!    the transposed `QKᵀ ⊙ D`: `M[j, i] = (q_i · k_j) D_ij` (j <= i). Work-item `r` owns
//!    columns `r` and `r + 32` of `M` and accumulates them over the key dimension, so the
//!    dot products are formed once per chunk without staging `K`.
//! 2. Per row `i` in order, per column: `R_i = β_i (v_i - e^Γ_i k_i · S)`, the forward
//!    substitution `V_new_i = R_i - Σ_{j<i} L_ij V_new_j` (this solves `(I + L) V_new = R`,
//!    i.e. `V_new = U - W S` with `U = T diag(β) V`, `W = T diag(β e^Γ) K`, `T = (I + L)^-1`,
//!    without forming `T` or `W`), then `O_i = e^Γ_i q_i · S + Σ_{j<=i} M[j, i] V_new_j`.
//! 3. `S = e^Γ_last S + Σ_i e^(Γ_last - Γ_i) k_i V_new_iᵀ`.
//!
//! `q`, `k` and `v` are read in place from the conv output rows. Every accumulation is a
//! chain of `fma` in increasing index order, so the host code and the generated Rust agree
//! bit for bit. Shared memory: `128 * 32 + 64 * 64 + 64 * 32 + 3 * 64` floats = 41 KiB.

use loom::kernel;

/// `qkv`: `[t, cd]` conv output rows `[q: hk dk | k: hk dk | v: hv dv]`, q and k normalised;
/// `beta`, `g`: `[t, hv]`; `state`: `[hv, dk, dv]`, read and updated; `out`: `[t, hv, dv]`.
/// Value head `h` reads key head `h / (hv / hk)`. `dk <= 128`. Grid: x = ceil(dv / 32),
/// y = hv / hk, z = hk (value head `h = z * (hv / hk) + y`, key head `z`).
#[kernel(name = "deltanet.delta_rule", version = 1, workgroup = 32)]
fn delta_rule(
    qkv: &[f32],
    beta: &[f32],
    g: &[f32],
    state: &mut [f32],
    out: &mut [f32],
    t: u32,
    cd: u32,
    dk: u32,
    dv: u32,
) {
    // Chunk length, value columns per workgroup (the workgroup size), largest dk.
    const CH: u32 = 64;
    const DVB: u32 = 32;
    const MAX_DK: u32 = 128;
    let s = shared::<f32>(MAX_DK * DVB);
    let m = shared::<f32>(CH * CH);
    let vn = shared::<f32>(CH * DVB);
    let gam = shared::<f32>(CH);
    let eg = shared::<f32>(CH);
    let el = shared::<f32>(CH);

    // Head indices are written out in each region that uses them (between barriers), so
    // they stay uniform in the host code.
    for d in 0..dk {
        let h = group_id_z() * num_groups_y() + group_id_y();
        let c = group_id() * DVB + local_id();
        s[d * DVB + local_id()] = if c < dv {
            state[(h * dk + d) * dv + c]
        } else {
            0.0
        };
    }
    for c0 in (0..t).step_by(CH) {
        // Γ, the running sum in row order.
        if local_id() == 0 {
            let hv = num_groups_y() * num_groups_z();
            let h = group_id_z() * num_groups_y() + group_id_y();
            let mut acc = 0.0;
            for i in 0..min(CH, t - c0) {
                acc += g[(c0 + i) * hv + h];
                gam[i] = acc;
            }
        }
        barrier();
        let n = min(CH, t - c0);
        let hv = num_groups_y() * num_groups_z();
        let h = group_id_z() * num_groups_y() + group_id_y();
        let kq = group_id_z() * dk;
        let kk = (num_groups_z() + group_id_z()) * dk;
        for rb in 0..(CH / DVB) {
            if rb * DVB + local_id() < n {
                eg[rb * DVB + local_id()] = exp(gam[rb * DVB + local_id()]);
                el[rb * DVB + local_id()] = exp(gam[n - 1] - gam[rb * DVB + local_id()]);
            }
            for i in 0..n {
                m[i * CH + rb * DVB + local_id()] = 0.0;
            }
        }
        // M[i, r] += (r < i ? k_r : q_r)[d] k_i[d], over d in order.
        for d in 0..dk {
            for rb in 0..(CH / DVB) {
                let r = rb * DVB + local_id();
                let kr = if r < n {
                    qkv[(c0 + r) * cd + kk + d]
                } else {
                    0.0
                };
                let qr = if r < n {
                    qkv[(c0 + r) * cd + kq + d]
                } else {
                    0.0
                };
                for i in 0..n {
                    // k_r below the diagonal, q_r on and above it, chosen by arithmetic
                    // (exact: one term is 0) so the host code loads both as vectors.
                    let below = if r < i { 1.0 } else { 0.0 };
                    m[i * CH + r] = fma(
                        fma(below, kr, (1.0 - below) * qr),
                        qkv[(c0 + i) * cd + kk + d],
                        m[i * CH + r],
                    );
                }
            }
        }
        // Decays, and β on L.
        for rb in 0..(CH / DVB) {
            let r = rb * DVB + local_id();
            for i in 0..n {
                let x = m[i * CH + r];
                m[i * CH + r] = if r < i {
                    beta[(c0 + i) * hv + h] * x * exp(gam[i] - gam[r])
                } else {
                    x * exp(gam[r] - gam[i])
                };
            }
        }
        barrier();
        let n = min(CH, t - c0);
        let hk = num_groups_z();
        let hv = num_groups_y() * num_groups_z();
        let h = group_id_z() * num_groups_y() + group_id_y();
        let kq = group_id_z() * dk;
        let kk = (num_groups_z() + group_id_z()) * dk;
        let c = group_id() * DVB + local_id();
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
            let mut r = beta[(c0 + i) * hv + h] * (v - eg[i] * ks);
            for j in 0..i {
                r = fma(-m[i * CH + j], vn[j * DVB + local_id()], r);
            }
            vn[i * DVB + local_id()] = r;
            let mut o = eg[i] * qs;
            for j in 0..i + 1 {
                o = fma(m[j * CH + i], vn[j * DVB + local_id()], o);
            }
            if c < dv {
                out[((c0 + i) * hv + h) * dv + c] = o;
            }
        }
        for d in 0..dk {
            let mut x = eg[n - 1] * s[d * DVB + local_id()];
            for i in 0..n {
                x = fma(
                    el[i] * qkv[(c0 + i) * cd + kk + d],
                    vn[i * DVB + local_id()],
                    x,
                );
            }
            s[d * DVB + local_id()] = x;
        }
        // No barrier: the next chunk's Γ (lane 0, above) writes nothing read here.
    }
    for d in 0..dk {
        let h = group_id_z() * num_groups_y() + group_id_y();
        let c = group_id() * DVB + local_id();
        if c < dv {
            state[(h * dk + d) * dv + c] = s[d * DVB + local_id()];
        }
    }
}
