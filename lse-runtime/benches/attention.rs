//! Prefill attention on the `host` device, dense against FlashPrefill V2, for one KV-head group
//! of Qwen3.5-0.8B's shape (4 query heads on 1 KV head, head_dim 256, bf16 KV cache), run with
//! `cargo bench -p lse-runtime --bench attention [-- LENGTHS...]` (default 4096 16384 65536).
//!
//! Each length is one prefill pass over the whole sequence (`pos0 = 0`); FlashPrefill V2's time
//! includes its selection (pooling, block scores, block lists), reported separately too. Dense
//! attention runs twice: with f32 queries and with queries rounded to the bf16 cache
//! ([`ops::Queries`], llama.cpp's rule; the scores on the bf16 dot). A
//! length given as `LEN:ROWS` instead times a pass of the last ROWS query rows over LEN cache
//! rows (a chunked prefill's last pass), for lengths where a whole dense pass takes too long.
//! Each time is the best of the runs that fit in a second, at least one.
//!
//! Inputs: random per-token content, plus the structure real attention maps have and the
//! selection is built to find: a shared rotary component makes scores fall with distance
//! (locality), the first 4 keys and 16 scattered "stripe" keys share a direction with every
//! query (sinks and vertical stripes). The density FlashPrefill V2 reaches depends on that
//! structure; it is printed beside the time.

mod common;

use half::bf16;
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, AttnShape, FlashPrefillParams, KvSlice, KvView, Queries};

const N_HEADS: usize = 4;
const HEAD_DIM: usize = 256;

/// Query and key rows for `len` positions: `q` `[len, N_HEADS, HEAD_DIM]`, `k` and `v`
/// `[len, 1, HEAD_DIM]`.
fn inputs(len: usize) -> (Vec<f32>, Vec<bf16>, Vec<bf16>) {
    let mut rng = common::Lcg(7);
    let half = HEAD_DIM / 2;
    // Rotary component: pair i turns by theta_i per position; amplitude on slow pairs only.
    let theta: Vec<f32> = (0..half)
        .map(|i| 10_000f32.powf(-(i as f32) / half as f32))
        .collect();
    let amp: Vec<f32> = (0..half)
        .map(|i| if i >= half / 2 { 0.35 } else { 0.0 })
        .collect();
    let rot = |p: usize, i: usize| {
        let a = p as f32 * theta[i];
        (amp[i] * a.cos(), amp[i] * a.sin())
    };
    let stripes: Vec<usize> = (0..16).map(|s| (s * 7919 + 131) % len.max(1)).collect();
    let mut q = vec![0.0; len * N_HEADS * HEAD_DIM];
    let mut k = vec![bf16::ZERO; len * HEAD_DIM];
    let v: Vec<bf16> = common::random(len * HEAD_DIM, 11, 1.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    for p in 0..len {
        for h in 0..N_HEADS {
            let row = &mut q[(p * N_HEADS + h) * HEAD_DIM..][..HEAD_DIM];
            for x in row.iter_mut() {
                *x = rng.next();
            }
            for i in 0..half {
                let (c, s) = rot(p, i);
                row[2 * i] += 4.0 * c;
                row[2 * i + 1] += 4.0 * s;
            }
            // The shared "sink" direction: the first coordinate.
            row[0] += 3.0;
        }
        let sink = p < 4 || stripes.contains(&p);
        for i in 0..half {
            let (c, s) = rot(p, i);
            k[p * HEAD_DIM + 2 * i] = bf16::from_f32(rng.next() + 4.0 * c);
            k[p * HEAD_DIM + 2 * i + 1] = bf16::from_f32(rng.next() + 4.0 * s);
        }
        if sink {
            k[p * HEAD_DIM] = bf16::from_f32(k[p * HEAD_DIM].to_f32() + 12.0);
        }
    }
    (q, k, v)
}

/// Best wall time of the runs of `f` that fit in a second, at least one (a long pass runs
/// once), in seconds.
fn secs(f: impl FnMut()) -> f64 {
    common::best_within(1, 1.0, f)
}

fn main() {
    let lengths: Vec<(usize, Option<usize>)> = {
        let args: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        let parse = |a: &str| -> (usize, Option<usize>) {
            match a.split_once(':') {
                Some((l, r)) => (l.parse().expect("LEN"), Some(r.parse().expect("ROWS"))),
                None => (a.parse().expect("LEN"), None),
            }
        };
        if args.is_empty() {
            vec![(4096, None), (16384, None), (65536, None)]
        } else {
            args.iter().map(|a| parse(a)).collect()
        }
    };
    let dev = Device::open(Pool::Host).expect("host device");
    let params = FlashPrefillParams::default();
    println!(
        "prefill attention, host device {} ({} threads), {N_HEADS} query heads / 1 KV head, head_dim {HEAD_DIM}, bf16 KV, FlashPrefill V2 {params:?}",
        dev.arch(),
        rayon::current_num_threads()
    );
    println!(
        "| length | query rows | dense s | dense, bf16 queries s | FP2 s (selection s) | speedup | density | max abs diff |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (len, rows) in lengths {
        let t = rows.unwrap_or(len).min(len);
        let (q_all, k, v) = inputs(len);
        let q = &q_all[(len - t) * N_HEADS * HEAD_DIM..];
        let shape = AttnShape {
            t,
            pos0: len - t,
            n_heads: N_HEADS,
            n_kv_heads: 1,
            head_dim: HEAD_DIM,
            scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        };
        let kv = KvView {
            k: KvSlice::Bf16((&k).into()),
            v: KvSlice::Bf16((&v).into()),
        };
        let mut dense = vec![0.0; q.len()];
        let mut sparse = vec![0.0; q.len()];
        // Warm up the thread pool and caches on a short pass.
        let warm = AttnShape {
            t: 256.min(len),
            pos0: 0,
            ..shape
        };
        ops::prefill_attention_dense(
            &dev,
            &warm,
            &q_all[..warm.t * N_HEADS * HEAD_DIM],
            kv,
            Queries::F32,
            &mut vec![0.0; warm.t * N_HEADS * HEAD_DIM],
        )
        .expect("warm-up");
        let dense_for = |queries, out: &mut [f32]| {
            secs(|| {
                ops::prefill_attention_dense(&dev, &shape, q, kv, queries, &mut *out)
                    .expect("dense")
            })
        };
        let dense_s = dense_for(Queries::F32, &mut dense);
        let rounded_s = dense_for(Queries::RoundedToBf16Cache, &mut sparse);
        let mut lists = None;
        let select_s = secs(|| {
            lists =
                Some(ops::flashprefill_select(&dev, &shape, q, kv.k, &params).expect("selection"))
        });
        let lists = lists.expect("lists");
        let attend_s = secs(|| {
            ops::prefill_attention_sparse(&dev, &shape, q, kv, &lists, Queries::F32, &mut sparse)
                .expect("sparse")
        });
        let diff = dense
            .iter()
            .zip(&sparse)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let fp2_s = select_s + attend_s;
        println!(
            "| {len} | {t} | {dense_s:.3} | {rounded_s:.3} | {fp2_s:.3} ({select_s:.3}) | {:.2}x | {:.1}% | {diff:.2e} |",
            dense_s / fp2_s,
            100.0 * lists.density()
        );
    }
}
