//! `deltanet.delta_prep.v2`: the per-chunk matrices of the chunked gated delta rule
//! (`qwen35-spec.md` §8.7), which depend on the chunk's keys, queries, β and g but not on the
//! state, so they are formed once per (value head, chunk of 64 rows), all chunks at once,
//! for [`super::delta_rule`] to read.
//!
//! With `Γ` the cumulative sum of the chunk's `g` and `D_ij = exp(Γ_i - Γ_j)`, one 64 x 64
//! matrix `M` holds in its strict lower triangle `L_ij = β_i (k_i · k_j) D_ij` (j < i) and in
//! its upper triangle and diagonal the transposed `QKᵀ ⊙ D`: `M[j, i] = (q_i · k_j) D_ij`
//! (j <= i); beside it go `e^Γ` and `e^(Γ_last - Γ)`. Work-item `r` owns column `r` of `M`
//! and accumulates it over the key dimension in order (`fma`), so each dot product is formed
//! once without staging `K`. Entries of rows and columns past a short last chunk are left
//! unwritten. Shared memory: `64 * 64 + 64` floats = 16.25 KiB.

use loom::kernel;

/// `qkv`: `[t, cd]` conv output rows `[q: hk dk | k: hk dk | v: ..]`, q and k normalised;
/// `beta`, `g`: `[t, hv]`; `mats`: `[hv, chunks, 64, 64]` (`M` above); `decay`: `[hv, chunks,
/// 2, 64]` (`e^Γ`, then `e^(Γ_last - Γ)`), with `chunks = ceil(t / 64)`. Grid: x = chunks,
/// y = hv / hk, z = hk; the workgroup's key head is `z` and its value head
/// `h` as in [`super::delta_rule`].
#[kernel(name = "deltanet.delta_prep", version = 2, workgroup = 64)]
fn delta_prep(
    qkv: &[f32; t * cd],
    beta: &[f32; t * num_groups_y() * num_groups_z()],
    g: &[f32; t * num_groups_y() * num_groups_z()],
    mats: &mut [f32; num_groups_y() * num_groups_z() * num_groups() * 64 * 64],
    decay: &mut [f32; num_groups_y() * num_groups_z() * num_groups() * 2 * 64],
    t: u32,
    cd: u32,
    dk: u32,
    tiled: u32,
) {
    const CH: u32 = 64;
    let m = shared::<f32>(CH * CH);
    let gam = shared::<f32>(CH);
    // Γ, the running sum in row order.
    if local_id() == 0 {
        let hv = num_groups_y() * num_groups_z();
        let h = if tiled == 0 {
            group_id_z() * num_groups_y() + group_id_y()
        } else {
            group_id_y() * num_groups_z() + group_id_z()
        };
        let mut acc = 0.0;
        for i in 0..min(CH, t - group_id() * CH) {
            acc += g[(group_id() * CH + i) * hv + h];
            gam[i] = acc;
        }
    }
    barrier();
    // Index values are written out in this region, after the barrier, so they stay uniform
    // in the host code.
    let c0 = group_id() * CH;
    let n = min(CH, t - c0);
    let hv = num_groups_y() * num_groups_z();
    let h = if tiled == 0 {
        group_id_z() * num_groups_y() + group_id_y()
    } else {
        group_id_y() * num_groups_z() + group_id_z()
    };
    let chunk = h * ((t + CH - 1) / CH) + group_id();
    let kq = group_id_z() * dk;
    let kk = (num_groups_z() + group_id_z()) * dk;
    let r = local_id();
    if r < n {
        decay[chunk * 2 * CH + r] = exp(gam[r]);
        decay[chunk * 2 * CH + CH + r] = exp(gam[n - 1] - gam[r]);
    }
    for i in 0..n {
        m[i * CH + r] = 0.0;
    }
    // M[i, r] += (r < i ? k_r : q_r)[d] k_i[d], over d in order.
    for d in 0..dk {
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
            // k_r below the diagonal, q_r on and above it, chosen by arithmetic (exact: one
            // term is 0) so the host code loads both as vectors.
            let below = if r < i { 1.0 } else { 0.0 };
            m[i * CH + r] = fma(
                fma(below, kr, (1.0 - below) * qr),
                qkv[(c0 + i) * cd + kk + d],
                m[i * CH + r],
            );
        }
    }
    // Decays, and β on L.
    if r < n {
        for i in 0..n {
            let x = m[i * CH + r];
            mats[(chunk * CH + i) * CH + r] = if r < i {
                beta[(c0 + i) * hv + h] * x * exp(gam[i] - gam[r])
            } else {
                x * exp(gam[r] - gam[i])
            };
        }
    }
}
