//! Runs kernels defined with `#[loom::kernel]` through their generated Rust CPU entry
//! (`KERNEL.cpu`) on real buffers and checks the results against values computed here.
//! This crate has no LOOM build script, so `host`/`gpu` are empty and `BUILD_IR_HASH` is "".

use lse_dsl::rt::RawBuf;

fn raw<T>(v: &mut [T]) -> RawBuf {
    RawBuf {
        ptr: v.as_mut_ptr().cast(),
        len: v.len(),
    }
}

fn f(x: f32) -> u64 {
    x.to_bits() as u64
}

/// The pairwise tree every backend uses: `a[i] = op(a[i], a[i + s])` for s = n/2, .., 1.
fn tree<T: Copy>(mut a: Vec<T>, op: impl Fn(T, T) -> T) -> T {
    let mut s = a.len() / 2;
    while s > 0 {
        for i in 0..s {
            a[i] = op(a[i], a[i + s]);
        }
        s /= 2;
    }
    a[0]
}

#[loom::kernel(name = "test.elementwise", version = 1, workgroup = 32)]
fn elementwise(
    x: &[f32],
    xi: &[i32],
    y: &mut [f32],
    yi: &mut [i32],
    yu: &mut [u32],
    n: u32,
    a: f32,
) {
    let i = group_id() * group_size() + local_id();
    if i < n && x[i] == x[i] {
        y[i] = fma(a, x[i], 1.0).max(-2.0);
        yi[i] = xi[i] * 65536 + (x[i] as i32);
        yu[i] = (xi[i] as u32) << 31u32 | (xi[i] as u32) >> 33u32;
    }
}

/// Constant instances: `rows_r4` and `rows_r2`, each its own module with its value of `R`.
#[loom::kernel(name = "test.rows", version = 1, workgroup = 8, consts = [4, 2])]
fn rows<const R: u32>(y: &mut [u32]) {
    let i = group_id() * 8 + local_id();
    y[i] = R * 100 + i % R;
}

#[test]
fn constant_instances_each_take_their_value() {
    assert_eq!(rows_r4::KERNEL.id, "test.rows_r4.v1");
    assert_eq!(rows_r2::KERNEL.id, "test.rows_r2.v1");
    for (cpu, r) in [(rows_r4::KERNEL.cpu, 4u32), (rows_r2::KERNEL.cpu, 2)] {
        let mut y = vec![0u32; 16];
        cpu(&[raw(&mut y)], &[], [2, 1, 1], 0, 2);
        let want: Vec<u32> = (0..16).map(|i| r * 100 + i % r).collect();
        assert_eq!(y, want, "R = {r}");
    }
}

/// Labelled instances of two constants: `pairs_even` and `pairs_odd`.
#[loom::kernel(
    name = "test.pairs",
    version = 1,
    workgroup = 8,
    consts = [even = (2, 0), odd = (3, 1)]
)]
fn pairs<const STEP: u32, const START: u32>(y: &mut [u32]) {
    let i = group_id() * 8 + local_id();
    y[i] = START + i * STEP;
}

#[test]
fn labelled_instances_each_take_their_values() {
    assert_eq!(pairs_even::KERNEL.id, "test.pairs_even.v1");
    assert_eq!(pairs_odd::KERNEL.id, "test.pairs_odd.v1");
    for (cpu, step, start) in [
        (pairs_even::KERNEL.cpu, 2u32, 0u32),
        (pairs_odd::KERNEL.cpu, 3, 1),
    ] {
        let mut y = vec![0u32; 16];
        cpu(&[raw(&mut y)], &[], [2, 1, 1], 0, 2);
        let want: Vec<u32> = (0..16).map(|i| start + i * step).collect();
        assert_eq!(y, want, "step {step}");
    }
}

/// A LOOM function of this file: the signed byte at byte `o` of a word buffer.
#[loom::function]
fn i8_at(w: &[u32], o: u32) -> i32 {
    let shift = o % 4 * 8;
    (((w[o / 4] >> shift) << 24) as i32) >> 24
}

/// LOOM functions, inlined at their calls: 32 bits at even byte offsets of a word buffer
/// (one word, or the halves of two; declared in the body) and the signed byte at any offset
/// (the file's `i8_at`).
#[loom::kernel(name = "test.fns", version = 1, workgroup = 8)]
fn read_bytes(w: &[u32], words: &mut [u32], bytes: &mut [i32]) {
    /// The 32 bits at even byte `o`.
    fn word_at(w: &[u32], o: u32) -> u32 {
        if o % 4 == 0 {
            w[o / 4]
        } else {
            (w[o / 4] >> 16) | (w[o / 4 + 1] << 16)
        }
    }
    let i = local_id();
    words[i] = word_at(w, 2 * i);
    bytes[i] = i8_at(w, i) + i8_at(w, i + 8);
}

/// A procedure of this file: element `at` of `dst` and the one after it, each argument
/// evaluated once (`v` reads `dst[at]` before the stores).
#[loom::function]
fn store_twice(dst: &mut [i32], at: u32, v: i32) {
    dst[at] = v + 1;
    dst[at + 1] = v;
}

/// A second kernel calling the file's `i8_at` and `store_twice`.
#[loom::kernel(name = "test.fns_bytes", version = 1, workgroup = 16)]
fn signed_bytes(w: &[u32], bytes: &mut [i32]) {
    bytes[local_id()] = i8_at(w, local_id());
    if local_id() == 0 {
        store_twice(bytes, 16, bytes[0]);
    }
}

#[test]
fn functions_compute_what_their_bodies_say_at_each_call() {
    let mut w: Vec<u32> = (0..5u32)
        .map(|i| 0x8091_a2b3u32.wrapping_mul(i + 7))
        .collect();
    let le: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut words = vec![0u32; 8];
    let mut bytes = vec![0i32; 8];
    (read_bytes::KERNEL.cpu)(
        &[raw(&mut w), raw(&mut words), raw(&mut bytes)],
        &[],
        [1, 1, 1],
        0,
        1,
    );
    for i in 0..8 {
        let o = 2 * i;
        let want = u32::from_le_bytes([le[o], le[o + 1], le[o + 2], le[o + 3]]);
        assert_eq!(words[i], want, "word at byte {o}");
        assert_eq!(
            bytes[i],
            le[i] as i8 as i32 + le[i + 8] as i8 as i32,
            "bytes {i}"
        );
    }
    let mut signed = vec![0i32; 18];
    (signed_bytes::KERNEL.cpu)(&[raw(&mut w), raw(&mut signed)], &[], [1, 1, 1], 0, 1);
    let mut want: Vec<i32> = le[..16].iter().map(|&b| b as i8 as i32).collect();
    want.extend([want[0] + 1, want[0]]);
    assert_eq!(signed, want);
}

#[test]
fn elementwise_kernel_follows_ir_semantics() {
    let n = 70u32;
    let mut x: Vec<f32> = (0..n).map(|i| (i as f32 - 35.0) * 1.0e8).collect();
    x[5] = f32::NAN; // skipped by `x[i] == x[i]`
    let mut xi: Vec<i32> = (0..n as i32).map(|i| i * 40_000 - 1_000_000).collect();
    let len = 96;
    let (mut y, mut yi, mut yu) = (vec![7.0f32; len], vec![7i32; len], vec![7u32; len]);
    let bufs = [
        raw(&mut x),
        raw(&mut xi),
        raw(&mut y),
        raw(&mut yi),
        raw(&mut yu),
    ];
    (elementwise::KERNEL.cpu)(&bufs, &[n as u64, f(0.25)], [3, 1, 1], 0, 3);
    for i in 0..len {
        if i >= n as usize || i == 5 {
            assert_eq!(
                (y[i], yi[i], yu[i]),
                (7.0, 7, 7),
                "element {i} must be untouched"
            );
            continue;
        }
        assert_eq!(y[i], 0.25f32.mul_add(x[i], 1.0).max(-2.0), "y[{i}]");
        assert_eq!(
            yi[i],
            xi[i].wrapping_mul(65536).wrapping_add(x[i] as i32),
            "yi[{i}]"
        );
        let u = xi[i] as u32;
        assert_eq!(
            yu[i],
            u.rotate_right(1),
            "yu[{i}] (x << 31 | x >> 33: shift amounts are mod 32)"
        );
    }
}

#[loom::kernel(name = "test.from_bits", version = 1, workgroup = 32)]
fn from_bits(u: &[u32], f: &mut [f32], h: &mut [f32], b: &mut [f32]) {
    let i = group_id() * group_size() + local_id();
    f[i] = f32_from_bits(u[i]);
    h[i] = f16_to_f32(f16_from_bits(u[i]));
    b[i] = bf16_to_f32(bf16_from_bits(u[i] >> 16));
}

#[test]
fn from_bits_builtins_read_the_words_bits() {
    let mut u: Vec<u32> = (0..64u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9) ^ 0x3c00)
        .collect();
    u[0] = 0x7f80_0000;
    let (mut fv, mut hv, mut bv) = (vec![0f32; 64], vec![0f32; 64], vec![0f32; 64]);
    let bufs = [raw(&mut u), raw(&mut fv), raw(&mut hv), raw(&mut bv)];
    (from_bits::KERNEL.cpu)(&bufs, &[], [2, 1, 1], 0, 2);
    for i in 0..64 {
        assert_eq!(fv[i].to_bits(), u[i], "f32 {i}");
        let h = lse_dsl::__private::half::f16::from_bits(u[i] as u16).to_f32();
        let b = f32::from_bits(u[i] & 0xffff_0000);
        for (got, want, what) in [(hv[i], h, "f16"), (bv[i], b, "bf16")] {
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{what} {i}"
            );
        }
    }
}

#[loom::kernel(name = "test.reverse", version = 1, workgroup = 16)]
fn reverse(x: &[u32], out: &mut [u32]) {
    let tile = shared::<u32>(16);
    let lid = local_id();
    let base = group_id() * group_size();
    tile[lid] = x[base + lid];
    barrier();
    out[base + lid] = tile[group_size() - 1 - lid];
}

#[test]
fn shared_memory_and_barrier_reverse_each_workgroup() {
    let mut x: Vec<u32> = (0..64).map(|i| i * 3 + 1).collect();
    let mut out = vec![0u32; 64];
    let bufs = [raw(&mut x), raw(&mut out)];
    // Groups 1..4 only: group 0 stays zero, proving the group range is honoured.
    (reverse::KERNEL.cpu)(&bufs, &[], [4, 1, 1], 1, 4);
    for g in 0..4 {
        for l in 0..16 {
            let want = if g == 0 { 0 } else { x[g * 16 + 15 - l] };
            assert_eq!(out[g * 16 + l], want, "group {g} lane {l}");
        }
    }
    assert_eq!(reverse::KERNEL.shared_bytes, 64);
    assert!(reverse::KERNEL.host.is_empty() && reverse::KERNEL.gpu.is_empty());
    assert_eq!(reverse::BUILD_IR_HASH, "");
}

/// A prefetch whose offset reads a buffer and wraps in `u32`, before a copy.
#[loom::kernel(name = "test.prefetch", version = 1, workgroup = 16)]
fn prefetch_copy(x: &[u32], ahead: &[u32], out: &mut [u32], len: u32) {
    let base = group_id() * group_size();
    prefetch(x, base + ahead[group_id()], len);
    out[base + local_id()] = x[base + local_id()] + 1;
}

#[test]
fn prefetch_evaluates_its_range_and_changes_nothing() {
    let mut x: Vec<u32> = (0..48).map(|i| i * 7).collect();
    let mut ahead = vec![16, u32::MAX - 3, 1 << 30];
    let mut out = vec![0u32; 48];
    let bufs = [raw(&mut x), raw(&mut ahead), raw(&mut out)];
    (prefetch_copy::KERNEL.cpu)(&bufs, &[1 << 20], [3, 1, 1], 0, 3);
    let want: Vec<u32> = x.iter().map(|v| v + 1).collect();
    assert_eq!(out, want);
}

#[loom::kernel(name = "test.collectives", version = 1, workgroup = 16)]
fn collectives(
    x: &[f32],
    xi: &[i32],
    xu: &[u32],
    out: &mut [f32],
    outi: &mut [i32],
    outu: &mut [u32],
    bcast: &mut [f32],
) {
    let lid = local_id();
    let g = group_id();
    let i = g * group_size() + lid;
    let v = x[i];
    let sum = reduce_sum(v);
    let mx = reduce_max(v);
    let mn = reduce_min(v);
    let (best, at) = argmax(v, 15 - lid);
    let b = broadcast(v * 2.0, g + 1);
    let isum = reduce_sum(xi[i]);
    let imax = reduce_max(xi[i]);
    let umin = reduce_min(xu[i]);
    let usum = reduce_sum(xu[i]);
    bcast[i] = b;
    if lid == 0 {
        out[g * 4] = sum;
        out[g * 4 + 1] = mx;
        out[g * 4 + 2] = mn;
        out[g * 4 + 3] = best;
        outi[g * 2] = isum;
        outi[g * 2 + 1] = imax;
        outu[g * 3] = at;
        outu[g * 3 + 1] = umin;
        outu[g * 3 + 2] = usum;
    }
}

#[test]
fn collectives_combine_in_tree_order_with_ties_and_nan() {
    let groups = 3usize;
    let mut x: Vec<f32> = (0..16 * groups)
        .map(|i| ((i * 7919) % 23) as f32 * 0.1 - 1.1)
        .collect();
    // Group 0: NaN at lanes 0 and 5, maximum 9.5 at lanes 3 and 9 (argmax index 15 - lane:
    // 12 and 6, so the tie goes to lane 9). Group 1: every value NaN except lane 7.
    x[0] = f32::NAN;
    x[5] = f32::NAN;
    x[3] = 9.5;
    x[9] = 9.5;
    for l in 0..16 {
        x[16 + l] = if l == 7 { -3.0 } else { f32::NAN };
    }
    let mut xi: Vec<i32> = (0..16 * groups as i32).map(|i| i32::MAX - i * 3).collect();
    let mut xu: Vec<u32> = (0..16 * groups as u32).map(|i| u32::MAX - i * 5).collect();
    let mut out = vec![0.0f32; 4 * groups];
    let mut outi = vec![0i32; 2 * groups];
    let mut outu = vec![0u32; 3 * groups];
    let mut bcast = vec![0.0f32; 16 * groups];
    let bufs = [
        raw(&mut x),
        raw(&mut xi),
        raw(&mut xu),
        raw(&mut out),
        raw(&mut outi),
        raw(&mut outu),
        raw(&mut bcast),
    ];
    (collectives::KERNEL.cpu)(&bufs, &[], [groups as u32, 1, 1], 0, groups as u32);
    for g in 0..groups {
        let xs = x[g * 16..g * 16 + 16].to_vec();
        let sum = tree(xs.clone(), |a, b| a + b);
        let want = [sum, tree(xs.clone(), f32::max), tree(xs.clone(), f32::min)];
        for (k, w) in want.iter().enumerate() {
            assert_eq!(
                out[g * 4 + k].to_bits(),
                w.to_bits(),
                "group {g} reduction {k}"
            );
        }
        let is = xi[g * 16..g * 16 + 16].to_vec();
        assert_eq!(
            outi[g * 2],
            tree(is.clone(), i32::wrapping_add),
            "group {g} isum"
        );
        assert_eq!(outi[g * 2 + 1], *is.iter().max().unwrap(), "group {g} imax");
        let us = xu[g * 16..g * 16 + 16].to_vec();
        assert_eq!(outu[g * 3 + 1], *us.iter().min().unwrap(), "group {g} umin");
        assert_eq!(
            outu[g * 3 + 2],
            tree(us, u32::wrapping_add),
            "group {g} usum"
        );
        for l in 0..16 {
            let b = x[g * 16 + g + 1] * 2.0;
            assert_eq!(
                bcast[g * 16 + l].to_bits(),
                b.to_bits(),
                "group {g} lane {l} broadcast"
            );
        }
    }
    // Sums with NaN inputs are NaN; max and min ignore NaN.
    assert!(out[0].is_nan());
    assert_eq!(
        (out[1], out[3], outu[0]),
        (9.5, 9.5, 6),
        "argmax tie -> lower index"
    );
    assert_eq!((out[4 + 1], out[4 + 2]), (-3.0, -3.0));
    assert_eq!(
        (out[4 + 3], outu[3]),
        (-3.0, 8),
        "a lone number beats every NaN"
    );
    // Group 2: a unique maximum.
    let xs = &x[32..48];
    let (best_lane, best) = xs
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |acc, (l, &v)| {
            if v > acc.1 || (v == acc.1 && 15 - l < 15 - acc.0) {
                (l, v)
            } else {
                acc
            }
        });
    assert_eq!((out[8 + 3], outu[6]), (best, 15 - best_lane as u32));
}

#[loom::kernel(name = "test.scan", version = 1, workgroup = 32)]
fn scan(x: &[u32], out: &mut [u32], halves: &mut [u32]) {
    let t = shared::<u32>(32);
    let lid = local_id();
    let base = group_id() * group_size();
    t[lid] = x[base + lid];
    barrier();
    for k in 0..5u32 {
        let off = 1u32 << k;
        let v = if lid >= off { t[lid - off] } else { 0 };
        barrier();
        t[lid] = t[lid] + v;
        barrier();
    }
    out[base + lid] = t[lid];
    // A uniform while loop with a barrier: halve the scan until one value is left.
    let mut s = group_size() / 2;
    while s > 0 {
        if lid < s {
            t[lid] = t[lid] + t[lid + s];
        }
        barrier();
        s = s / 2;
    }
    if lid == 0 {
        halves[group_id()] = t[0];
    }
}

#[test]
fn uniform_loops_with_barriers_compute_a_scan() {
    let mut x: Vec<u32> = (0..64u32).map(|i| i * i % 17 + 1).collect();
    let mut out = vec![0u32; 64];
    let mut halves = vec![0u32; 2];
    let bufs = [raw(&mut x), raw(&mut out), raw(&mut halves)];
    (scan::KERNEL.cpu)(&bufs, &[], [2, 1, 1], 0, 2);
    for g in 0..2 {
        let mut acc = 0;
        let mut prefix = Vec::new();
        for l in 0..32 {
            acc += x[g * 32 + l];
            prefix.push(acc);
            assert_eq!(out[g * 32 + l], acc, "group {g} lane {l}");
        }
        assert_eq!(halves[g], prefix.iter().sum::<u32>(), "group {g}");
    }
}

#[test]
fn kernel_def_metadata_is_filled_in() {
    let k = &collectives::KERNEL;
    assert_eq!(k.id, "test.collectives.v1");
    assert_eq!(k.fn_name, "collectives");
    assert_eq!(k.workgroup_size, 16);
    assert_eq!(k.params.len(), 7);
    assert_eq!(k.params[0].name, "x");
    assert_eq!(
        k.params[3].kind,
        lse_dsl::rt::ParamKind::Buffer {
            elem: "f32",
            writable: true
        }
    );
    assert!(k.rust_src.contains("pub fn collectives("), "{}", k.rust_src);
    assert!(!k.ir_text.is_empty());
    assert_eq!(k.ir_hash.len(), 64);
    assert_ne!(k.ir_hash, scan::KERNEL.ir_hash);
}

#[loom::kernel(name = "test.grid", version = 1, workgroup = 2)]
fn grid(out: &mut [u32]) {
    let linear = (group_id_z() * num_groups_y() + group_id_y()) * num_groups() + group_id();
    out[linear * 2 + local_id()] = group_id() + 10 * group_id_y() + 100 * group_id_z();
}

#[test]
fn group_ids_linearise_x_fastest() {
    let (nx, ny, nz) = (3u32, 4u32, 2u32);
    let total = nx * ny * nz;
    let mut out = vec![u32::MAX; total as usize * 2];
    let bufs = [raw(&mut out)];
    // Two launches over halves of the range, as the runtime splits work over threads.
    (grid::KERNEL.cpu)(&bufs, &[], [nx, ny, nz], 0, 7);
    (grid::KERNEL.cpu)(&bufs, &[], [nx, ny, nz], 7, total);
    for g in 0..total {
        let (x, y, z) = (g % nx, g / nx % ny, g / (nx * ny));
        for l in 0..2 {
            assert_eq!(
                out[(g * 2 + l) as usize],
                x + 10 * y + 100 * z,
                "group {g} lane {l}"
            );
        }
    }
}

#[loom::kernel(name = "test.tiles", version = 1, workgroup = 16)]
fn tiles(x: &[f32], w: &[bf16], y: &mut [f32], yt: &mut [bf16]) {
    let a = tile::<bf16, 3, 4>();
    let b = tile::<bf16, 4, 2>();
    let acc = tile::<f32, 3, 2>();
    let more = tile::<f32, 3, 2>();
    tile_load(a, x, 1, 5, 3, 3);
    tile_load_t(b, w, 0, 4, 4, 2);
    tile_dot(acc, a, b);
    tile_load(more, y, 0, 2, 3, 2);
    tile_add(acc, more);
    tile_store(acc, y, 0, 2, 3, 2);
    tile_zero(more);
    tile_store_t(more, yt, 0, 3, 2, 2);
}

/// The tile statements' reference semantics: a load with a window narrower than the tile
/// (zero columns), a transposed load, `tile_dot` with 16-bit operands (activations rounded to
/// bf16), `tile_add` of the previous `y`, a store, and `tile_zero` with a transposed store
/// that writes only its window.
#[test]
fn tile_statements_follow_their_reference_semantics() {
    use lse_dsl::__private::half::bf16;
    let mut x: Vec<f32> = (0..16).map(|i| 1.0 + i as f32 / 3.0).collect();
    let mut w: Vec<bf16> = (0..8)
        .map(|i| bf16::from_f32(0.5 - i as f32 / 8.0))
        .collect();
    let mut y: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let mut yt = vec![bf16::from_f32(9.0); 6];
    let y0 = y.clone();
    let bufs = [raw(&mut x), raw(&mut w), raw(&mut y), raw(&mut yt)];
    (tiles::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for r in 0..3 {
        for c in 0..2 {
            // a[r][j] = x[1 + 5r + j] for j < 3, 0 for j = 3; b[j][c] = w[4c + j].
            let want: f32 = (0..3)
                .map(|j| bf16::from_f32(x[1 + 5 * r + j]).to_f32() * w[4 * c + j].to_f32())
                .sum::<f32>()
                + y0[2 * r + c];
            assert!((y[2 * r + c] - want).abs() <= 1e-5, "y[{r}][{c}]");
        }
    }
    // `more` is 3x2 and zeroed; stored transposed with rows 2, cols 2: yt[c * 3 + r] for
    // r < 2, c < 2, every other element untouched.
    for (i, v) in yt.iter().enumerate() {
        let written = [0, 1, 3, 4].contains(&i);
        assert_eq!(v.to_f32(), if written { 0.0 } else { 9.0 }, "yt[{i}]");
    }
}

#[loom::kernel(name = "test.tile_softmax", version = 1, workgroup = 8)]
fn tile_softmax(x: &[f32], gain: &[f32], y: &mut [f32], p: &mut [bf16], scale: f32) {
    let t = tile::<f32, 3, 6>();
    let m = tile::<f32, 3, 1>();
    let l = tile::<f32, 3, 1>();
    let g = tile::<f32, 1, 6>();
    let half = tile::<bf16, 3, 6>();
    tile_load(t, x, 0, 6, 3, 6);
    tile_load(m, x, 18, 1, 3, 1);
    tile_load(g, gain, 0, 6, 1, 6);
    tile_scale(t, scale);
    tile_row_max(m, t);
    tile_sub(t, m);
    tile_exp(t);
    tile_row_sum(l, t);
    tile_div(t, l);
    tile_copy(half, t);
    tile_mul(t, g);
    tile_store(t, y, 0, 6, 3, 6);
    tile_store(half, p, 0, 6, 3, 6);
}

/// The elementwise and row tile statements' reference semantics, against an independent
/// softmax in f64: `tile_row_max` starts from the tile it accumulates into (here -inf), the
/// broadcasts take one value per row (`m`, `l`) or per column (`g`), `tile_copy` rounds to
/// bf16.
#[test]
fn tile_softmax_statements_follow_their_reference_semantics() {
    use lse_dsl::__private::half::bf16;
    let scale = 0.5f32;
    let mut x: Vec<f32> = (0..18).map(|i| ((i * 7) % 11) as f32 - 3.0).collect();
    x.extend([f32::NEG_INFINITY; 3]);
    let mut gain: Vec<f32> = (0..6).map(|c| 1.0 + c as f32).collect();
    let (mut y, mut p) = (vec![0f32; 18], vec![bf16::ZERO; 18]);
    let bufs = [raw(&mut x), raw(&mut gain), raw(&mut y), raw(&mut p)];
    (tile_softmax::KERNEL.cpu)(&bufs, &[scale.to_bits() as u64], [1, 1, 1], 0, 1);
    for r in 0..3 {
        let row: Vec<f64> = (0..6).map(|c| x[6 * r + c] as f64 * scale as f64).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for c in 0..6 {
            let want = (row[c] - max).exp() / total;
            let i = 6 * r + c;
            assert!(
                (p[i].to_f64() - want).abs() <= want * 2f64.powi(-8),
                "p[{i}]"
            );
            let got = y[i] as f64 / gain[c] as f64;
            assert!((got - want).abs() <= 1e-6, "y[{i}] = {} want {want}", y[i]);
        }
    }
}

#[loom::kernel(name = "test.half_arith", version = 1, workgroup = 8)]
fn half_arith(a: &[bf16], b: &[bf16], out: &mut [bf16], less: &mut [u32]) {
    let i = local_id();
    let x = a[i];
    let y = b[i];
    out[i] = -(x * y + x / y);
    less[i] = if x - y < y { 1 } else { 0 };
}

/// bf16 values: arithmetic in f32 rounded once per operation (the `half` crate's operators),
/// comparisons on the values.
#[test]
fn half_arithmetic_rounds_each_operation() {
    use lse_dsl::__private::half::bf16;
    let mut a: Vec<bf16> = (0..8)
        .map(|i| bf16::from_f32(1.0 + i as f32 / 3.0))
        .collect();
    let mut b: Vec<bf16> = (0..8)
        .map(|i| bf16::from_f32(3.0 - i as f32 / 7.0))
        .collect();
    let (mut out, mut less) = (vec![bf16::ZERO; 8], vec![9u32; 8]);
    let (a0, b0) = (a.clone(), b.clone());
    let bufs = [raw(&mut a), raw(&mut b), raw(&mut out), raw(&mut less)];
    (half_arith::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for i in 0..8 {
        let (x, y) = (a0[i].to_f32(), b0[i].to_f32());
        let r = |v: f32| bf16::from_f32(v).to_f32();
        let want = -r(r(x * y) + r(x / y));
        assert_eq!(out[i].to_f32(), want, "out[{i}]");
        assert_eq!(less[i], u32::from(r(x - y) < y), "less[{i}]");
    }
}

#[loom::kernel(name = "test.subgroup_sums", version = 1, workgroup = 16, subgroup = 4)]
fn subgroup_sums(x: &[u32], sums: &mut [u32], next: &mut [u32], where_: &mut [u32]) {
    let i = local_id();
    sums[i] = subgroup_sum(x[i]);
    next[i] = subgroup_shuffle(x[i], subgroup_lane() + 1);
    where_[i] = subgroup_id() * subgroup_size() + subgroup_lane();
}

/// The generated Rust's subgroups: groups of 4 consecutive work-items, the sum within each,
/// a rotating shuffle that wraps inside the subgroup, and ids and lanes that rebuild the
/// work-item index.
#[test]
fn subgroup_builtins_work_within_groups_of_the_declared_size() {
    let mut x: Vec<u32> = (0..16).map(|i| 1 << i).collect();
    let (mut sums, mut next, mut where_) = (vec![0u32; 16], vec![0u32; 16], vec![0u32; 16]);
    let bufs = [
        raw(&mut x),
        raw(&mut sums),
        raw(&mut next),
        raw(&mut where_),
    ];
    (subgroup_sums::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for i in 0..16 {
        let base = i / 4 * 4;
        assert_eq!(sums[i], 0b1111 << base, "sum {i}");
        assert_eq!(next[i], 1 << (base + (i + 1) % 4), "next {i}");
        assert_eq!(where_[i], i as u32, "where {i}");
    }
}

#[loom::kernel(name = "test.tile_shared", version = 1, workgroup = 8)]
fn tile_shared(q: &[u32], x: &[f32], y: &mut [f32], back: &mut [f32], scale: f32) {
    let wq = shared::<f32>(64);
    let staged = shared::<f32>(64);
    let a = tile::<f32, 3, 4>();
    let b = tile::<f32, 4, 5>();
    let acc = tile::<f32, 3, 5>();
    let lid = local_id();
    for j in 0u32..8u32 {
        wq[j * 8 + lid] = (q[j * 8 + lid] as f32 - 8.0) * scale;
        staged[j * 8 + lid] = -1.0;
    }
    tile_load(a, x, 0, 4, 3, 4);
    tile_load_t(b, wq, 2, 6, 3, 5);
    tile_dot(acc, a, b);
    tile_store(acc, y, 0, 5, 3, 5);
    tile_load(b, wq, 40, 5, 4, 4);
    tile_store_t(b, staged, 1, 9, 4, 5);
    tile_store(acc, staged, 50, 6, 2, 5);
    for j in 0u32..8u32 {
        back[j * 8 + lid] = staged[j * 8 + lid];
    }
}

/// Tile windows on f32 shared arrays in the generated Rust: the work-items' dequantised
/// values are what `tile_load_t` reads (ragged: row 3 of `b` is zero), a ragged `tile_load`
/// leaves column 4 zero, and `tile_store_t` / `tile_store` into `staged` write their windows
/// only (the rest keeps the work-items' -1), which the work-items read back after them.
#[test]
fn tile_windows_on_shared_arrays_follow_their_reference_semantics() {
    let scale = 0.25f32;
    let mut q: Vec<u32> = (0..64).map(|i| (i * 7 + 3) % 16).collect();
    let mut x: Vec<f32> = (0..12).map(|i| 1.0 + i as f32 / 3.0).collect();
    let (mut y, mut back) = (vec![0f32; 15], vec![0f32; 64]);
    let wq: Vec<f32> = q.iter().map(|&c| (c as f32 - 8.0) * scale).collect();
    let bufs = [raw(&mut q), raw(&mut x), raw(&mut y), raw(&mut back)];
    (tile_shared::KERNEL.cpu)(&bufs, &[f(scale)], [1, 1, 1], 0, 1);
    // acc[r][n] = sum over k < 3 of x[4r + k] * wq[2 + 6n + k], fused in increasing k.
    let mut acc = [[0f32; 5]; 3];
    for (r, row) in acc.iter_mut().enumerate() {
        for (n, v) in row.iter_mut().enumerate() {
            for k in 0..4 {
                let w = if k < 3 { wq[2 + 6 * n + k] } else { 0.0 };
                *v = x[4 * r + k].mul_add(w, *v);
            }
            assert_eq!(y[5 * r + n].to_bits(), v.to_bits(), "y[{r}][{n}]");
        }
    }
    let mut staged = vec![-1f32; 64];
    for r in 0..4 {
        for c in 0..5 {
            staged[1 + 9 * c + r] = if c < 4 { wq[40 + 5 * r + c] } else { 0.0 };
        }
    }
    for r in 0..2 {
        for c in 0..5 {
            staged[50 + 6 * r + c] = acc[r][c];
        }
    }
    for (i, (got, want)) in back.iter().zip(&staged).enumerate() {
        assert_eq!(got.to_bits(), want.to_bits(), "back[{i}]: {got} vs {want}");
    }
}

#[loom::kernel(name = "test.tiles_int", version = 1, workgroup = 8)]
fn tiles_int(x: &[i32], w: &[i32], y: &mut [f32], s: &mut [i32]) {
    let ws = shared::<i32>(8);
    let a = tile::<i16, 3, 4>();
    let b = tile::<i16, 4, 2>();
    let acc = tile::<i32, 3, 2>();
    let f = tile::<f32, 3, 2>();
    ws[local_id()] = w[local_id()];
    tile_load(a, x, 1, 5, 3, 3);
    tile_load_t(b, ws, 0, 4, 4, 2);
    tile_dot(acc, a, b);
    tile_dot(acc, a, b);
    tile_copy(f, acc);
    tile_store(f, y, 0, 2, 3, 2);
    tile_store_t(acc, s, 0, 3, 3, 2);
}

/// Integer tiles' reference semantics: i32 values wrapped to i16 as they load (from a buffer
/// and from a shared array), zero outside the window, exact products summed in wrapping i32,
/// the sums converted to f32 and stored as they are.
#[test]
fn integer_tile_statements_follow_their_reference_semantics() {
    let mut x: Vec<i32> = (0..16).map(|i| (i - 5) * 9_000 + i * i).collect();
    let mut w: Vec<i32> = (0..8).map(|i| 70_000 - i * 23_456).collect();
    let (mut y, mut s) = (vec![0f32; 6], vec![7i32; 6]);
    let (x0, w0) = (x.clone(), w.clone());
    let bufs = [raw(&mut x), raw(&mut w), raw(&mut y), raw(&mut s)];
    (tiles_int::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for r in 0..3 {
        for c in 0..2 {
            // a[r][j] = x[1 + 5r + j] for j < 3, 0 for j = 3; b[j][c] = w[4c + j].
            let dot = (0..3).fold(0i32, |acc, j| {
                let p = i32::from(x0[1 + 5 * r + j] as i16) * i32::from(w0[4 * c + j] as i16);
                acc.wrapping_add(p)
            });
            let want = dot.wrapping_mul(2);
            assert_eq!(y[2 * r + c], want as f32, "y[{r}][{c}]");
            assert_eq!(s[c * 3 + r], want, "s[{c}][{r}]");
        }
    }
}

#[loom::kernel(name = "test.tiles_byte", version = 1, workgroup = 8)]
fn tiles_byte(x: &[i32], w: &[i32], s: &mut [i32]) {
    let ws = shared::<i32>(8);
    let a = tile::<i8, 3, 4>();
    let b = tile::<u8, 4, 2>();
    let sc = tile::<i32, 1, 2>();
    let acc = tile::<i32, 3, 2>();
    ws[local_id()] = w[local_id()];
    tile_load(a, x, 1, 5, 3, 3);
    tile_load_t(b, ws, 0, 4, 4, 2);
    tile_load(sc, x, 14, 1, 1, 2);
    tile_dot_scaled(acc, a, b, sc);
    tile_dot(acc, a, b);
    tile_store(acc, s, 0, 2, 3, 2);
}

/// Byte tiles' reference semantics: i32 values wrapped to i8 and u8 as they load, zero
/// outside the window, exact products summed in wrapping i32, a scaled dot's sums times its
/// column's scale.
#[test]
fn byte_tile_statements_follow_their_reference_semantics() {
    let mut x: Vec<i32> = (0..16).map(|i| (i - 5) * 300 + i * i).collect();
    let mut w: Vec<i32> = (0..8).map(|i| 700 - i * 234).collect();
    let mut s = vec![7i32; 6];
    let (x0, w0) = (x.clone(), w.clone());
    let bufs = [raw(&mut x), raw(&mut w), raw(&mut s)];
    (tiles_byte::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for r in 0..3 {
        for c in 0..2 {
            // a[r][j] = x[1 + 5r + j] for j < 3, 0 for j = 3; b[j][c] = w[4c + j].
            let dot = (0..3).fold(0i32, |acc, j| {
                let p = i32::from(x0[1 + 5 * r + j] as i8) * i32::from(w0[4 * c + j] as u8);
                acc.wrapping_add(p)
            });
            let want = dot.wrapping_mul(x0[14 + c]).wrapping_add(dot);
            assert_eq!(s[2 * r + c], want, "s[{r}][{c}]");
        }
    }
}

#[loom::kernel(name = "test.tiles_byte_dequant_grouped", version = 1, workgroup = 8)]
fn tiles_byte_dequant_grouped(x: &[i32], w: &[i32], f: &[f32], y: &mut [f32]) {
    let a = tile::<i8, 3, 8>();
    let b = tile::<u8, 8, 2>();
    let off = tile::<f32, 3, 2>();
    let rows = tile::<f32, 3, 2>();
    let cols = tile::<f32, 2, 2>();
    let acc = tile::<f32, 3, 2>();
    tile_load(a, x, 0, 8, 3, 8);
    tile_load(b, w, 0, 2, 8, 2);
    tile_load(off, f, 0, 2, 3, 2);
    tile_load(rows, f, 6, 2, 3, 2);
    tile_load(cols, f, 12, 2, 2, 2);
    tile_load(acc, y, 0, 2, 3, 2);
    tile_dot_dequant(acc, a, b, off, rows, cols);
    tile_store(acc, y, 0, 2, 3, 2);
}

/// A dequantized dot per group of K: each group's integer sum, plus its row's offset for the
/// group, times its row's and its column's scales for the group, added in group order.
#[test]
fn grouped_dequantized_byte_dots_scale_each_group_of_k_by_its_own_scales() {
    let mut x: Vec<i32> = (0..24).map(|i| (i * 53 % 251) - 125).collect();
    let mut w: Vec<i32> = (0..16).map(|i| i * 29 % 256).collect();
    let mut f: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut y: Vec<f32> = (0..6).map(|i| i as f32 * 0.25 - 0.5).collect();
    let (x0, w0, f0, y0) = (x.clone(), w.clone(), f.clone(), y.clone());
    let bufs = [raw(&mut x), raw(&mut w), raw(&mut f), raw(&mut y)];
    (tiles_byte_dequant_grouped::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for r in 0..3 {
        for c in 0..2 {
            let mut want = y0[2 * r + c];
            for g in 0..2 {
                let sum = (4 * g..4 * g + 4).fold(0i32, |t, k| {
                    t + i32::from(x0[8 * r + k] as i8) * i32::from(w0[2 * k + c] as u8)
                });
                let d = f0[6 + 2 * r + g] * f0[12 + 2 * g + c];
                want += (sum as f32 + f0[2 * r + g]) * d;
            }
            assert_eq!(y[2 * r + c].to_bits(), want.to_bits(), "y[{r}][{c}]");
        }
    }
}

#[loom::kernel(name = "test.tiles_byte_grouped", version = 1, workgroup = 8)]
fn tiles_byte_grouped(x: &[i32], w: &[i32], s: &mut [i32]) {
    let a = tile::<i8, 3, 8>();
    let b = tile::<u8, 8, 2>();
    let sg = tile::<i32, 2, 2>();
    let og = tile::<i32, 3, 2>();
    let acc = tile::<i32, 3, 2>();
    tile_load(a, x, 0, 8, 3, 8);
    tile_load(b, w, 0, 2, 8, 2);
    tile_load(sg, x, 24, 2, 2, 2);
    tile_load(og, x, 28, 2, 3, 2);
    tile_dot_scaled(acc, a, b, sg, og);
    tile_store(acc, s, 0, 2, 3, 2);
}

/// A dot scaled per group of K: each group's sum starts from its row's offset for the group
/// and is multiplied by its column's scale for the group, the groups' results added.
#[test]
fn grouped_scaled_byte_dots_scale_each_group_of_k_by_its_own_row_of_scales() {
    let mut x: Vec<i32> = (0..34).map(|i| (i * 53 % 251) - 125).collect();
    let mut w: Vec<i32> = (0..16).map(|i| i * 29 % 256).collect();
    let mut s = vec![0i32; 6];
    let (x0, w0) = (x.clone(), w.clone());
    let bufs = [raw(&mut x), raw(&mut w), raw(&mut s)];
    (tiles_byte_grouped::KERNEL.cpu)(&bufs, &[], [1, 1, 1], 0, 1);
    for r in 0..3 {
        for c in 0..2 {
            let want = (0..2).fold(0i32, |acc, g| {
                let sum = (4 * g..4 * g + 4).fold(x0[28 + 2 * r + g], |t, k| {
                    t + i32::from(x0[8 * r + k] as i8) * i32::from(w0[2 * k + c] as u8)
                });
                acc.wrapping_add(sum.wrapping_mul(x0[24 + 2 * g + c]))
            });
            assert_eq!(s[2 * r + c], want, "s[{r}][{c}]");
        }
    }
}
