//! `deltanet.delta_prep.v4`: the per-chunk matrices of the chunked gated delta rule
//! (`qwen35-spec.md` §8.7), which depend on the chunk's keys, queries, β and g but not on the
//! state, so they are formed once per (value head, chunk of 64 rows), all chunks at once,
//! for [`super::delta_rule`] to read.
//!
//! With `Γ` the cumulative sum of the chunk's `g` and `D_ij = exp(Γ_i - Γ_j)`, one 64 x 64
//! matrix `M` holds in its strict lower triangle `L_ij = β_i (k_i · k_j) D_ij` (j < i) and in
//! its upper triangle and diagonal the transposed `QKᵀ ⊙ D`: `M[j, i] = (q_i · k_j) D_ij`
//! (j <= i); beside it go `e^Γ` and `e^(Γ_last - Γ)`. The two products `K Kᵀ` and `K Qᵀ`
//! are tile dots (`LOOM.md`, "Tiles") over the key dimension, 16 at a time, one after the
//! other into one accumulator (the first kept in shared memory, the second stored to
//! `mats`), so each entry is one `fma` chain in increasing key index, as before; then
//! work-item `r` takes column `r`: the entries below the diagonal from `K Kᵀ`, those on and
//! above it from `K Qᵀ`, times their decays (and β). Computed per work-item over strided
//! rows of `qkv` (and the decays one row loop per work-item, with scalar `exp`), the kernel
//! took 3.7% of a 0.8B perplexity run; now 1.3%. Entries of rows and columns past a short
//! last chunk are left unwritten.
//!
//! Decays below `e^-69` (1.0e-30, about 2^-99.6) are stored as 0, and so is an entry of `M` below
//! the least normal float (2^-126). Strong gates make tiny decays common (in the 0.8B-shaped test
//! model g averages -6 a row, so `Γ` passes -87 within a chunk), and the delta rule multiplies them
//! into thousands of products: with exact decays some of those products and operands are subnormal
//! floats, for which Intel cores take a microcode assist of about a hundred cycles (AMD's Zen cores
//! do not). On an Intel Xeon (family 6, model 207) `deltanet.delta_rule.v4` took 2,312 of the 8,958
//! kernel ms of a 4-chunk Q8_0 run after v3, 455 of 7,052 after this kernel. A term decayed by
//! `e^-69` is 2^-99 of its undecayed size, far below f32's 2^-24 resolution, so it can move a sum
//! only where every other term is smaller still: the three 0.8B-shaped GGUF files score the same
//! perplexity to the last digit after v3 and after v4 (`docs/measurements.md`, "Subnormal
//! decays"). `exp` sees only arguments from -69 up, so it forms no subnormal either.
//!
//! Shared memory and tiles: `64 * 64 + 64` floats and 24 KiB = 40.25 KiB.

use loom::kernel;

/// `qkv`: `[t, cd]` conv output rows `[q: hk dk | k: hk dk | v: ..]`, q and k normalised;
/// `beta`, `g`: `[t, hv]`; `mats`: `[hv, chunks, 64, 64]` (`M` above); `decay`: `[hv, chunks,
/// 2, 64]` (`e^Γ`, then `e^(Γ_last - Γ)`), with `chunks = ceil(t / 64)`. Grid: x = chunks,
/// y = hv / hk, z = hk; the workgroup's key head is `z` and its value head
/// `h` as in [`super::delta_rule`].
#[kernel(name = "deltanet.delta_prep", version = 4, workgroup = 64)]
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
    // Chunk length; key dimensions per tile step.
    const CH: u32 = 64;
    const DB: u32 = 16;
    // Decays `e^x` with `x < FLOOR` are 0; the least positive normal f32, 2^-126, below
    // which an entry of `M` is 0 (the module notes).
    const FLOOR: f32 = -69.0;
    const SMALLEST_NORMAL: f32 = 1.1754944e-38;
    let m = shared::<f32>(CH * CH);
    let gam = shared::<f32>(CH);
    let keys = tile::<f32, CH, DB>();
    let cols = tile::<f32, DB, CH>();
    let dots = tile::<f32, CH, CH>();
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
    // The chunk's first row and length, its q and k columns in the rows, and its matrix.
    let c0 = group_id() * CH;
    let n = min(CH, t - c0);
    let kq = c0 * cd + group_id_z() * dk;
    let kk = c0 * cd + (num_groups_z() + group_id_z()) * dk;
    let h = if tiled == 0 {
        group_id_z() * num_groups_y() + group_id_y()
    } else {
        group_id_y() * num_groups_z() + group_id_z()
    };
    let chunk = h * ((t + CH - 1) / CH) + group_id();
    // dots[i][r] = k_i · k_r, kept in `m`, then k_i · q_r, kept in `mats`.
    for d0 in (0..dk).step_by(DB) {
        tile_load(keys, qkv, kk + d0, cd, n, dk - d0);
        tile_load_t(cols, qkv, kk + d0, cd, dk - d0, n);
        tile_dot(dots, keys, cols);
    }
    tile_store(dots, m, 0, CH, CH, CH);
    tile_zero(dots);
    for d0 in (0..dk).step_by(DB) {
        tile_load(keys, qkv, kk + d0, cd, n, dk - d0);
        tile_load_t(cols, qkv, kq + d0, cd, dk - d0, n);
        tile_dot(dots, keys, cols);
    }
    tile_store(dots, mats, chunk * CH * CH, CH, n, n);
    // Decays, β on L, and the transposed QKᵀ ⊙ D where the tile left it. The index values
    // are written out again in this region (the tile statements end the one above), so they
    // stay uniform in the host code and it runs the row loop outside the work-items, with
    // vectors of `exp`: both entries are read and one chosen by value, and β is 1 above the
    // diagonal, where `(1 · x) · e` is `x · e` exactly.
    let rows = min(CH, t - group_id() * CH);
    let head = if tiled == 0 {
        group_id_z() * num_groups_y() + group_id_y()
    } else {
        group_id_y() * num_groups_z() + group_id_z()
    };
    let first = (head * ((t + CH - 1) / CH) + group_id()) * CH;
    let r = local_id();
    // `exp` only sees arguments from `FLOOR` up, whose values are normal floats.
    if r < rows {
        let x0 = gam[r];
        let x1 = gam[rows - 1] - gam[r];
        let e0 = exp(max(x0, FLOOR));
        let e1 = exp(max(x1, FLOOR));
        decay[2 * first + r] = if x0 < FLOOR { 0.0 } else { e0 };
        decay[2 * first + CH + r] = if x1 < FLOOR { 0.0 } else { e1 };
    }
    for i in 0..rows {
        if r < rows {
            let at = (first + i) * CH + r;
            let below = r < i;
            let lower = m[i * CH + r];
            let upper = mats[at];
            let x = if below { lower } else { upper };
            let b = if below {
                beta[(group_id() * CH + i) * num_groups_y() * num_groups_z() + head]
            } else {
                1.0
            };
            let d = if below {
                gam[i] - gam[r]
            } else {
                gam[r] - gam[i]
            };
            let e = exp(max(d, FLOOR));
            let v = if d < FLOOR { 0.0 } else { b * x * e };
            mats[at] = if abs(v) < SMALLEST_NORMAL { 0.0 } else { v };
        }
    }
}
