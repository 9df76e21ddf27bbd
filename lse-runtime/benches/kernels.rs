//! Benchmark of the scoring kernels on the `host` device (LLVM-compiled LOOM code), run with
//! `cargo bench -p lse-runtime --bench kernels`.
//!
//! - LM head, matrix form (the LOOM GEMM with f32 activations), 128 x 1024 x 248,320 with bf16
//!   weights: GFLOP/s, beside the same product through `matrixmultiply`'s sgemm (weights
//!   converted to f32 once, outside the timing, and the vocabulary split over all cores with
//!   rayon).
//! - `lse_pick` and `topk_pairs` (k = 32) at vocabulary 248,320: rows/s, beside one plain
//!   read of the same rows (the memory speed both kernels are bounded by).

mod common;

use half::bf16;
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, HeadWeight};
use rayon::prelude::*;

use common::{best_within, random};

const ROWS: usize = 128;
const DIM: usize = 1024;
const VOCAB: usize = 248_320;

fn sgemm_reference(hidden: &[f32], w32: &[f32], out: &mut [f32]) {
    const BLOCK: usize = 2048;
    // out is [ROWS, VOCAB]; each task computes the columns of one vocabulary block.
    let blocks: Vec<(usize, Vec<f32>)> = (0..VOCAB.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let v0 = b * BLOCK;
            let n = BLOCK.min(VOCAB - v0);
            let mut c = vec![0.0f32; ROWS * n];
            // C[ROWS, n] = H[ROWS, DIM] · W[v0.., DIM]ᵀ
            unsafe {
                matrixmultiply::sgemm(
                    ROWS,
                    DIM,
                    n,
                    1.0,
                    hidden.as_ptr(),
                    DIM as isize,
                    1,
                    w32[v0 * DIM..].as_ptr(),
                    1,
                    DIM as isize,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
            (v0, c)
        })
        .collect();
    for (v0, c) in blocks {
        let n = c.len() / ROWS;
        for r in 0..ROWS {
            out[r * VOCAB + v0..r * VOCAB + v0 + n].copy_from_slice(&c[r * n..(r + 1) * n]);
        }
    }
}

fn main() {
    let dev = Device::open(Pool::Host).expect("host device");
    println!(
        "host device: {}, {} threads",
        dev.arch(),
        rayon::current_num_threads()
    );

    let hidden = random(ROWS * DIM, 1, 1.0);
    let w: Vec<bf16> = random(VOCAB * DIM, 2, 0.05)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let mut out = vec![0.0f32; ROWS * VOCAB];
    let flops = 2.0 * (ROWS * DIM * VOCAB) as f64;

    let t = best_within(2, 1.0, || {
        ops::lm_head(&dev, &hidden, DIM, HeadWeight::Bf16(&w), VOCAB, &mut out).unwrap()
    });
    println!(
        "lm_head (LOOM GEMM, f32 activations) {ROWS}x{DIM}x{VOCAB}: {:.3} s, {:.1} GFLOP/s",
        t,
        flops / t / 1e9
    );

    let w32: Vec<f32> = w.iter().map(|x| x.to_f32()).collect();
    let mut out_ref = vec![0.0f32; ROWS * VOCAB];
    let t = best_within(2, 1.0, || sgemm_reference(&hidden, &w32, &mut out_ref));
    println!(
        "matrixmultiply sgemm (f32 weights) {ROWS}x{DIM}x{VOCAB}: {:.3} s, {:.1} GFLOP/s",
        t,
        flops / t / 1e9
    );
    drop(w32);

    let max_diff = out
        .iter()
        .zip(&out_ref)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("max |LOOM - sgemm| = {max_diff:e}");

    // The memory peer: one plain read of every row (a wrapping sum of the bits, which
    // vectorises), the floor for a kernel that must read each logit once.
    let t = best_within(3, 1.0, || {
        let s = out
            .par_chunks(VOCAB)
            .map(|r| r.iter().fold(0u32, |a, &b| a.wrapping_add(b.to_bits())))
            .reduce(|| 0, u32::wrapping_add);
        std::hint::black_box(s);
    });
    println!(
        "one read of each row (memory peer) vocab {VOCAB}: {:.0} rows/s",
        ROWS as f64 / t
    );

    let ids: Vec<u32> = (0..ROWS * 33).map(|i| (i * 7919 % VOCAB) as u32).collect();
    let t = best_within(3, 1.0, || {
        ops::lse_pick(&dev, &out, VOCAB, &ids, 33).unwrap();
    });
    println!(
        "logits.lse_pick.v1 vocab {VOCAB}, 33 ids: {:.0} rows/s",
        ROWS as f64 / t
    );

    let t = best_within(3, 1.0, || {
        ops::topk_pairs(&dev, &out, VOCAB, 32).unwrap();
    });
    println!(
        "topk_pairs.v1 vocab {VOCAB}, k 32: {:.0} rows/s",
        ROWS as f64 / t
    );
}
