//! Benchmark of the GEMM on K-quant, Q4_0, Q5_0 and Q8_0 weights kept in their block format,
//! run with `cargo bench -p lse-runtime --bench gemm_quant` (2 threads: `RAYON_NUM_THREADS=2`).
//!
//! For Q4_K, Q5_K, Q6_K, Q4_0, Q5_0 and Q8_0 weights of the Qwen3.5-0.8B prefill shapes at
//! M = 512 and its LM head at M = 128 (a Q4_K_M file's head is Q6_K), on the best host level
//! this CPU runs, in one run: GFLOP/s of the integer GEMM (`act_quant.q8_k_int`, then
//! `gemm.xwt_<q>_q8_k`, byte tile dots into i32; `act_quant.q8_0_int` and
//! `gemm.xwt_<q>_q8_0_bm*` for Q4_0, Q5_0 and Q8_0) and of the f32 path it replaced (the
//! activations rounded through the same quantization, then `gemm.xwt_<q>` dequantizing each
//! block into an f32 `tile_dot`), and their ratio. `LSE_BENCH_SHAPES=512x3584x1024,...`
//! (M x N x K) runs only the named shapes.

mod common;

use lse_runtime::device::{DevSlice, Device, Pool};
use lse_runtime::ops::{
    gemm, interleave, quantize_activations, Activations, GemmOut, Interleaved, QuantFormat,
    QuantView, WeightView,
};

use common::{best_within, random};

/// (name, M, N, K).
const SHAPES: [(&str, usize, usize, usize); 6] = [
    ("attn qkv+gate / deltanet qkvz", 512, 6144, 1024),
    ("attn o / q", 512, 2048, 1024),
    ("mlp gate / up", 512, 3584, 1024),
    ("mlp down", 512, 1024, 3584),
    ("attn o_proj", 512, 1024, 2048),
    ("lm head, M = 128", 128, 248320, 1024),
];

/// `rows x k` values of `format`: random bytes, each block's f16 scales (`d`, and `dmin`
/// for Q4_K and Q5_K) set to small finite values.
fn blocks(format: QuantFormat, rows: usize, k: usize) -> Vec<u8> {
    let bytes = format.bytes_of(rows * k).expect("whole blocks");
    let mut b: Vec<u8> = random(bytes, 7, 1.0)
        .iter()
        .map(|v| (v.to_bits() >> 7) as u8)
        .collect();
    let scales: &[usize] = match format {
        QuantFormat::Q6_K => &[208],
        QuantFormat::Q4_0 | QuantFormat::Q5_0 | QuantFormat::Q8_0 => &[0],
        _ => &[0, 2],
    };
    for block in b.chunks_exact_mut(format.block_bytes()) {
        for &at in scales {
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(0.003).to_le_bytes());
        }
    }
    b
}

fn main() {
    let dev = Device::open(Pool::Host).expect("the host device");
    println!(
        "{} threads; host level {}",
        rayon::current_num_threads(),
        dev.arch()
    );
    println!(
        "{:<30} {:>6} {:>6} {:>5}  {:>5}  {:>14} {:>14} {:>6}",
        "shape", "M", "N", "K", "q", "int GFLOP/s", "f32 GFLOP/s", "ratio"
    );
    let wanted = |m: usize, n: usize, k: usize| {
        std::env::var("LSE_BENCH_SHAPES").map_or(true, |shapes| {
            shapes.split(',').any(|s| s == format!("{m}x{n}x{k}"))
        })
    };
    for (name, m, n, k) in SHAPES.into_iter().filter(|&(_, m, n, k)| wanted(m, n, k)) {
        let x = random(m * k, 1, 1.0);
        let mut y = vec![0.0f32; m * n];
        let mut xq = vec![0.0f32; m * k];
        let flops = 2.0 * (m * n * k) as f64;
        for (format, act) in [
            (QuantFormat::Q4_K, Activations::Q8K),
            (QuantFormat::Q5_K, Activations::Q8K),
            (QuantFormat::Q6_K, Activations::Q8K),
            (QuantFormat::Q4_0, Activations::Q8_0),
            (QuantFormat::Q5_0, Activations::Q8_0),
            (QuantFormat::Q8_0, Activations::Q8_0),
        ] {
            let mut bytes = blocks(format, n, k);
            let packed = interleave(format, &bytes, 1, n, k).expect("whole blocks");
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
            // The weight as loaded: in its blocks (the f32 path) and interleaved (the integer GEMM).
            let w = || {
                WeightView::Quant(QuantView {
                    format,
                    words: DevSlice::from(&words[..]),
                    len: n * k,
                    interleaved: Some(Interleaved {
                        words: DevSlice::from(&packed[..]),
                        rows: n,
                        cols: k,
                    }),
                })
            };
            let int = best_within(3, 1.0, || {
                gemm(&dev, &x[..], k, w(), n, &mut y[..], GemmOut::Overwrite, act)
                    .expect("integer GEMM");
            });
            let f32_path = best_within(3, 1.0, || {
                quantize_activations(&dev, &x[..], k, act, &mut xq[..])
                    .expect("quantized activations");
                gemm(
                    &dev,
                    &xq[..],
                    k,
                    w(),
                    n,
                    &mut y[..],
                    GemmOut::Overwrite,
                    Activations::F32,
                )
                .expect("f32 GEMM");
            });
            println!(
                "{name:<30} {m:>6} {n:>6} {k:>5}  {:>5}  {:>14.1} {:>14.1} {:>6.2}",
                format.name(),
                flops / int / 1e9,
                flops / f32_path / 1e9,
                f32_path / int
            );
        }
    }
}
