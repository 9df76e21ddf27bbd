//! GPU against CPU reference: every case runs on the first GPU device that opens (`hip:0`,
//! then `cuda:0`; `LSE_GPU_POOL` names another) and on `--pool cpu`, and the two must agree:
//! integers exactly, floats within a small tolerance (GPUs may contract multiply-adds and
//! use other `exp` implementations). Where no GPU runtime opens, the test prints
//! `skipped: <reason>` and passes.
//!
//! Besides each op on host slices, the resident path the scoring head takes is exercised:
//! device buffers round-tripped through GPU memory, the LM-head weight made resident once,
//! hidden rows uploaded, logits left in a device buffer and reduced there by `lse_pick` and
//! `topk_pairs` (whose ids and outputs are host slices in the same launches).

use half::bf16;
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, HeadWeight, ResidentHeadWeight};

/// One output of a case.
#[derive(Debug)]
enum Out {
    F32(&'static str, Vec<f32>),
    U32(&'static str, Vec<u32>),
}

/// Deterministic inputs in [-scale, scale) (SplitMix64).
fn values(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A named kernel case: runs on a device and returns its outputs.
type Case = (String, Box<dyn Fn(&Device) -> Vec<Out>>);

fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    for (rows, vocab, n_ids) in [(1, 7, 1), (3, 1000, 2), (2, 4099, 3)] {
        out.push((
            format!("lse_pick rows={rows} vocab={vocab} n_ids={n_ids}"),
            Box::new(move |dev| {
                let x = values(rows * vocab, 12.0, 1);
                let ids: Vec<u32> = (0..rows * n_ids)
                    .map(|i| (i * 131 % vocab) as u32)
                    .collect();
                let r = ops::lse_pick(dev, &x, vocab, &ids, n_ids).unwrap();
                vec![Out::F32("stats", r.stats), Out::F32("picked", r.picked)]
            }),
        ));
    }
    for (rows, vocab, k) in [(1, 40, 5), (3, 3000, 32)] {
        out.push((
            format!("topk_pairs rows={rows} vocab={vocab} k={k}"),
            Box::new(move |dev| {
                let x = values(rows * vocab, 12.0, 2);
                let r = ops::topk_pairs(dev, &x, vocab, k).unwrap();
                vec![Out::U32("ids", r.ids), Out::F32("logits", r.logits)]
            }),
        ));
    }
    for (rows, dim, vocab) in [(1, 64, 300), (5, 96, 260)] {
        out.push((
            format!("lm_head f32 rows={rows} dim={dim} vocab={vocab}"),
            Box::new(move |dev| {
                let h = values(rows * dim, 2.0, 3);
                let w = values(vocab * dim, 0.5, 4);
                let mut o = vec![0.0; rows * vocab];
                ops::lm_head(dev, &h, dim, HeadWeight::F32(&w), vocab, &mut o).unwrap();
                vec![Out::F32("logits", o)]
            }),
        ));
        out.push((
            format!("lm_head bf16 rows={rows} dim={dim} vocab={vocab}"),
            Box::new(move |dev| {
                let h = values(rows * dim, 2.0, 5);
                let w: Vec<bf16> = values(vocab * dim, 0.5, 6)
                    .into_iter()
                    .map(bf16::from_f32)
                    .collect();
                let mut o = vec![0.0; rows * vocab];
                ops::lm_head(dev, &h, dim, HeadWeight::Bf16(&w), vocab, &mut o).unwrap();
                vec![Out::F32("logits", o)]
            }),
        ));
    }
    out.push((
        "device buffers round-trip through device memory".to_string(),
        Box::new(|dev| {
            let x = values(1000, 3.0, 7);
            let mut f = dev.alloc::<f32>(1003).unwrap();
            f.upload(&x).unwrap();
            let mut back = vec![0.0f32; 1003];
            f.download(&mut back).unwrap();
            let words: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            let mut b = dev.alloc::<bf16>(words.len()).unwrap();
            b.upload(&words).unwrap();
            let mut wback = vec![bf16::ZERO; words.len()];
            b.download(&mut wback).unwrap();
            let ids: Vec<u32> = (0..77u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
            let mut u = dev.alloc::<u32>(ids.len()).unwrap();
            u.upload(&ids).unwrap();
            let mut uback = vec![0u32; ids.len()];
            u.download(&mut uback).unwrap();
            vec![
                Out::F32("f32 (zeroed tail)", back),
                Out::U32(
                    "bf16 bits",
                    wback.iter().map(|w| u32::from(w.to_bits())).collect(),
                ),
                Out::U32("u32", uback),
            ]
        }),
    ));
    for (rows, dim, vocab) in [(1, 64, 300), (7, 96, 4099)] {
        for bf16_weight in [true, false] {
            let dtype = if bf16_weight { "bf16" } else { "f32" };
            out.push((
                format!("resident head chain {dtype} rows={rows} dim={dim} vocab={vocab}"),
                Box::new(move |dev| resident_chain(dev, rows, dim, vocab, bf16_weight)),
            ));
        }
    }
    out
}

/// The scoring head's device path: weight resident, hidden rows uploaded into a buffer larger
/// than the block, logits kept in a device buffer (larger too) and reduced where they are.
fn resident_chain(
    dev: &Device,
    rows: usize,
    dim: usize,
    vocab: usize,
    bf16_weight: bool,
) -> Vec<Out> {
    let (n_ids, k) = (3, 8);
    let h = values(rows * dim, 2.0, 8);
    let wf = values(vocab * dim, 0.5, 9);
    let wb: Vec<bf16> = wf.iter().map(|&x| bf16::from_f32(x)).collect();
    let weight = if bf16_weight {
        HeadWeight::Bf16(&wb)
    } else {
        HeadWeight::F32(&wf)
    };
    let resident: ResidentHeadWeight<'_> = weight.resident(dev).unwrap();
    let mut hidden = dev.alloc::<f32>((rows + 2) * dim).unwrap();
    hidden.upload(&h).unwrap();
    let mut logits = dev.alloc::<f32>((rows + 2) * vocab).unwrap();
    ops::lm_head_dev(
        dev,
        hidden.slice(..rows * dim).unwrap(),
        dim,
        &resident,
        vocab,
        logits.slice_mut(..rows * vocab).unwrap(),
    )
    .unwrap();
    let view = logits.slice(..rows * vocab).unwrap();
    let ids: Vec<u32> = (0..rows * n_ids)
        .map(|i| (i * 131 % vocab) as u32)
        .collect();
    let pick = ops::lse_pick_dev(dev, view, vocab, &ids, n_ids).unwrap();
    let top = ops::topk_pairs_dev(dev, view, vocab, k).unwrap();
    let mut all = vec![0.0f32; rows * vocab];
    logits.download(&mut all).unwrap();
    vec![
        Out::F32("logits", all),
        Out::F32("stats", pick.stats),
        Out::F32("picked", pick.picked),
        Out::U32("top ids", top.ids),
        Out::F32("top logits", top.logits),
    ]
}

/// The GPU device to test, or why there is none.
fn gpu() -> Result<Device, String> {
    let wanted: Vec<Pool> = match std::env::var("LSE_GPU_POOL") {
        Ok(p) => vec![p.parse().map_err(|e| format!("LSE_GPU_POOL: {e}"))?],
        Err(_) => vec![Pool::Hip(0), Pool::Cuda(0)],
    };
    let mut reasons = Vec::new();
    for pool in wanted {
        match Device::open(pool) {
            Ok(dev) => return Ok(dev),
            Err(e) => reasons.push(e.to_string()),
        }
    }
    Err(reasons.join("; "))
}

/// `None` if `got` matches `want` (floats within abs 1e-4 + rel 1e-4, equal NaN/inf classes).
fn mismatch(got: &Out, want: &Out) -> Option<String> {
    match (got, want) {
        (Out::U32(n, g), Out::U32(_, w)) => (g != w).then(|| format!("{n}: {g:?} != {w:?}")),
        (Out::F32(n, g), Out::F32(_, w)) => {
            if g.len() != w.len() {
                return Some(format!("{n}: {} values, expected {}", g.len(), w.len()));
            }
            g.iter().zip(w).enumerate().find_map(|(i, (&a, &b))| {
                let ok = if a.is_nan() || b.is_nan() {
                    a.is_nan() && b.is_nan()
                } else if a.is_infinite() || b.is_infinite() {
                    a == b
                } else {
                    (a - b).abs() <= 1e-4 + 1e-4 * b.abs()
                };
                (!ok).then(|| format!("{n}[{i}]: gpu {a} vs cpu {b}"))
            })
        }
        _ => Some(format!("output kinds differ: {got:?} vs {want:?}")),
    }
}

#[test]
fn gpu_matches_cpu_reference() {
    let gpu = match gpu() {
        Ok(d) => d,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let cpu = Device::open(Pool::Cpu).unwrap();
    println!("gpu device: {} ({})", gpu.pool(), gpu.arch());
    let mut failures = Vec::new();
    for (name, run) in cases() {
        let (g, c) = (run(&gpu), run(&cpu));
        assert_eq!(g.len(), c.len(), "{name}");
        for (a, b) in g.iter().zip(&c) {
            if let Some(m) = mismatch(a, b) {
                failures.push(format!("{name}: {m}"));
            }
        }
        println!("{name}: ok ({:?} ms)", gpu.last_gpu_kernel_ms());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn mismatches_are_detected() {
    let a = Out::F32("x", vec![1.0, f32::NAN, f32::INFINITY]);
    assert!(mismatch(&a, &Out::F32("x", vec![1.0, f32::NAN, f32::INFINITY])).is_none());
    assert!(mismatch(&a, &Out::F32("x", vec![1.01, f32::NAN, f32::INFINITY])).is_some());
    assert!(mismatch(&a, &Out::F32("x", vec![1.0, 0.0, f32::INFINITY])).is_some());
    assert!(mismatch(&Out::U32("i", vec![1]), &Out::U32("i", vec![2])).is_some());
}
