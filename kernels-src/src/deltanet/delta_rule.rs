//! `deltanet.delta_rule.v5`: the chunked gated delta rule (`qwen35-spec.md` §8.7, chunks of
//! 64 tokens), continuing from and updating the recurrent state of every value head, from
//! the per-chunk matrices [`super::delta_prep`] formed.
//!
//! The value columns of a head's state `S` (`[dk, dv]`) evolve independently, so one
//! workgroup takes one value head and a block of 64 value columns and keeps that block of `S`
//! in two 64 x 64 tiles (key rows 0..64 and 64..128) for the whole pass. Per chunk of `n <= 64`
//! rows (the last one may be short; tile windows zero-pad it), with `M`, `e^Γ` and
//! `e^(Γ_last - Γ)` from the prep:
//!
//! 1. `K S` by tile dots into `acc`, stored into the workgroup's 64 x 64 block of the scratch
//!    `work`; the chunk's values copied by one tile load and store into this block of `out`;
//!    then per row `i` in order, one work-item per column, in place:
//!    `R_i = β_i (v_i - e^Γ_i (K S)_i)` and the forward substitution
//!    `V_new_i = R_i - Σ_{j<i} L_ij V_new_j` (this solves `(I + L) V_new = R`, i.e.
//!    `V_new = U - W S` with `U = T diag(β) V`, `W = T diag(β e^Γ) K`, `T = (I + L)^-1`,
//!    without forming `T` or `W`).
//! 2. `Q S` by tile dots, stored into `out`; then per row, in place,
//!    `O_i = e^Γ_i (Q S)_i + Σ_{j<=i} M[j, i] V_new_j`.
//! 3. `S = e^Γ_last S + (e^(Γ_last - Γ) ⊙ K)ᵀ V_new` by tile dots: per half of `S`, the keys
//!    loaded transposed and multiplied by a tile whose every row is the decays (a window of
//!    row stride 0), `V_new` loaded from `work`.
//!
//! `q` and `k` are read in place from the conv output rows. Every accumulation is a
//! chain of `fma` in increasing index order, each product formed as v3 formed it (the f32
//! `tile_dot`'s order on every target, `LOOM.md`), so v4 gives v3's values (but for the sign
//! of a zero: the zero padding of a short chunk adds `0 · 0`, which turns a -0 into +0); the
//! host code and the generated Rust agree bit for bit. v3 kept `S` and `V_new` in shared arrays and
//! ran every product as a work-item's own `fma` chain, reading each key and query value from
//! the rows once per product; here the three products of a chunk run as tile dots, so the
//! host's register blocks and a GPU's tile lowering take them. Tiles: four 64 x 64 f32, 64 KiB.
//! v5 gives v4's values: v4 read each row's values from `qkv` inside the substitution, where
//! every row (24 KiB from the last at Qwen3.5-0.8B's widths) missed the cache in turn, a
//! tenth of the kernel's time on the host.

use loom::kernel;

/// `qkv`: `[t, cd]` conv output rows `[q: hk dk | k: hk dk | v: hv dv]`, q and k normalised;
/// `beta`: `[t, hv]`; `mats`, `decay`: [`super::delta_prep`]'s for the same rows; `state`:
/// `[hv, dk, dv]`, read and updated; `out`: `[t, hv, dv]`; `work`: scratch, 64 x 64 per
/// workgroup.
/// `dk <= 128`. Grid: x = ceil(dv / 64), y = hv / hk, z = hk; the workgroup's key head is
/// `z` and its value head `h = z * (hv / hk) + y` when `tiled` is 0 (Hugging Face's grouped
/// order: value head `h` reads key head `h / (hv / hk)`), else `h = y * hk + z` (llama.cpp's
/// tiled order, which its GGUF converter writes: value head `h` reads key head `h % hk`).
#[kernel(name = "deltanet.delta_rule", version = 5, workgroup = 64)]
fn delta_rule(
    qkv: &[f32; t * cd],
    beta: &[f32; t * num_groups_y() * num_groups_z()],
    mats: &[f32; num_groups_y() * num_groups_z() * ((t + 63) / 64) * 64 * 64],
    decay: &[f32; num_groups_y() * num_groups_z() * ((t + 63) / 64) * 2 * 64],
    state: &mut [f32; num_groups_y() * num_groups_z() * dk * dv],
    out: &mut [f32; t * num_groups_y() * num_groups_z() * dv],
    work: &mut [f32; num_groups() * num_groups_y() * num_groups_z() * 64 * 64],
    t: u32,
    cd: u32,
    dk: u32,
    dv: u32,
    tiled: u32,
) {
    // Chunk length (and value columns per workgroup, the workgroup size), key rows per half
    // of `S`.
    const CH: u32 = 64;
    const DH: u32 = 64;
    let s0 = tile::<f32, DH, CH>();
    let s1 = tile::<f32, DH, CH>();
    let a = tile::<f32, CH, DH>();
    let acc = tile::<f32, CH, CH>();
    let hv = num_groups_y() * num_groups_z();
    let h = if tiled == 0 {
        group_id_z() * num_groups_y() + group_id_y()
    } else {
        group_id_y() * num_groups_z() + group_id_z()
    };
    let kq = group_id_z() * dk;
    let kk = (num_groups_z() + group_id_z()) * dk;
    let kv = 2 * num_groups_z() * dk + h * dv;
    let col0 = group_id() * CH;
    let c = col0 + local_id();
    // Row `r` of this head's block of `out` is at `r * out_row + out_block`; `work` holds a
    // 64 x 64 block per workgroup for the chunk at hand (64 columns, so every work-item's
    // column is its own, also past `dv`), the workgroup's from row `first`.
    let out_row = hv * dv;
    let out_block = h * dv + col0;
    let first = ((group_id_z() * num_groups_y() + group_id_y()) * num_groups() + group_id()) * CH;
    let upper = dk > DH;
    tile_load(s0, state, h * dk * dv + col0, dv, dk, dv - col0);
    if upper {
        tile_load(s1, state, (h * dk + DH) * dv + col0, dv, dk - DH, dv - col0);
    }
    for c0 in (0..t).step_by(CH) {
        let n = min(CH, t - c0);
        // This chunk's M and decays.
        let mb = (h * ((t + CH - 1) / CH) + c0 / CH) * CH * CH;
        let db = (h * ((t + CH - 1) / CH) + c0 / CH) * 2 * CH;
        // 1. K S, then the forward substitution in `work`.
        tile_zero(acc);
        tile_load(a, qkv, c0 * cd + kk, cd, n, dk);
        tile_dot(acc, a, s0);
        if upper {
            tile_load(a, qkv, c0 * cd + kk + DH, cd, n, dk - DH);
            tile_dot(acc, a, s1);
        }
        tile_store(acc, work, first * CH, CH, n, CH);
        // The chunk's values, copied whole into this block of `out` (free until step 2) so
        // their rows, 24 KiB apart in `qkv`, are fetched at once rather than one per row of
        // the substitution below.
        tile_load(a, qkv, c0 * cd + kv + col0, cd, n, dv - col0);
        tile_store(a, out, c0 * out_row + out_block, out_row, n, dv - col0);
        for i in 0..n {
            let ks = work[(first + i) * CH + local_id()];
            let v = if c < dv {
                out[c0 * out_row + out_block + i * out_row + local_id()]
            } else {
                0.0
            };
            let mut r = beta[(c0 + i) * hv + h] * (v - decay[db + i] * ks);
            for j in 0..i {
                r = fma(
                    -mats[mb + i * CH + j],
                    work[(first + j) * CH + local_id()],
                    r,
                );
            }
            work[(first + i) * CH + local_id()] = r;
        }
        // 2. Q S, then the outputs in `out`.
        tile_zero(acc);
        tile_load(a, qkv, c0 * cd + kq, cd, n, dk);
        tile_dot(acc, a, s0);
        if upper {
            tile_load(a, qkv, c0 * cd + kq + DH, cd, n, dk - DH);
            tile_dot(acc, a, s1);
        }
        tile_store(acc, out, c0 * out_row + out_block, out_row, n, dv - col0);
        for i in 0..n {
            let qs = if c < dv {
                out[c0 * out_row + out_block + i * out_row + local_id()]
            } else {
                0.0
            };
            let mut o = decay[db + i] * qs;
            for j in 0..i + 1 {
                o = fma(
                    mats[mb + j * CH + i],
                    work[(first + j) * CH + local_id()],
                    o,
                );
            }
            if c < dv {
                out[c0 * out_row + out_block + i * out_row + local_id()] = o;
            }
        }
        // 3. The state: per half, the decayed keys transposed (`acc` holds the decays in
        // every row while they are multiplied in), then `V_new` into `acc` and the dot.
        let last = decay[db + n - 1];
        tile_load(acc, decay, db + CH, 0, CH, n);
        tile_load_t(a, qkv, c0 * cd + kk, cd, dk, n);
        tile_mul(a, acc);
        tile_load(acc, work, first * CH, CH, n, CH);
        tile_scale(s0, last);
        tile_dot(s0, a, acc);
        if upper {
            tile_load(acc, decay, db + CH, 0, CH, n);
            tile_load_t(a, qkv, c0 * cd + kk + DH, cd, dk - DH, n);
            tile_mul(a, acc);
            tile_load(acc, work, first * CH, CH, n, CH);
            tile_scale(s1, last);
            tile_dot(s1, a, acc);
        }
    }
    tile_store(s0, state, h * dk * dv + col0, dv, dk, dv - col0);
    if upper {
        tile_store(s1, state, (h * dk + DH) * dv + col0, dv, dk - DH, dv - col0);
    }
}
