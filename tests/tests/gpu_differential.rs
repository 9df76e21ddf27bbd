//! GPU against generated Rust: every differential case of every LOOM kernel
//! ([`lse_tests::cases::all`], the inputs the CPU differential tests use) runs on the first GPU
//! device that opens (`hip:0`, then `cuda:0`; `LSE_GPU_POOL` names another, `host` for a dry
//! run) and on `--pool cpu`, and the two must agree within the case's own tolerance against
//! its reference (GPUs may contract multiply-adds and use other `exp` implementations);
//! integers exactly, except where the case's comparison allows a decision within rounding.
//! Where no GPU runtime opens, the test prints `skipped: <reason>` and passes.
//!
//! Besides each op on host slices, the resident path the scoring head takes is exercised:
//! device buffers round-tripped through GPU memory, the LM-head weight made resident once,
//! hidden rows uploaded, logits left in a device buffer and reduced there by `lse_pick` and
//! `topk_pairs` (whose ids and outputs are host slices in the same launches). And the whole
//! forward pass resident on the device: a dense and a MoE model loaded onto it
//! (`HybridLM::load_on`), their sessions' caches and states in its memory, two passes whose
//! hidden rows come back only at the end.

use half::bf16;
use lse_runtime::device::{Device, Pool};
use lse_runtime::model::synthetic::{write_random_model, SyntheticSpec};
use lse_runtime::model::{DType, HybridLM, PrefillAttention};
use lse_runtime::ops::{self, WeightView};
use lse_tests::cases;
use lse_tests::diff::{compare, Out, Rng, Tol};

/// Tolerance of the resident-path checks, which have no reference: logits of up to 96
/// products of magnitude <= 1 and their reductions.
const RESIDENT: Tol = Tol {
    abs: 1e-4,
    rel: 1e-4,
};

/// Tolerance of the resident forward: hidden rows after 4 layers of a random model, whose
/// kernels' f32 rounding (and a GPU's contracted multiply-adds) compound from layer to layer.
const FORWARD: Tol = Tol {
    abs: 2e-3,
    rel: 2e-3,
};

/// A named device path without a plain-Rust reference: runs on a device, returns its outputs.
type Check = (String, Box<dyn Fn(&Device) -> Vec<Out>>);

fn resident_checks() -> Vec<Check> {
    let mut out: Vec<Check> = vec![(
        "device buffers round-trip through device memory".to_string(),
        Box::new(round_trip),
    )];
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

/// The model loaded onto `dev` and run there in two passes (9 tokens, then 7: the second
/// continues the first's KV cache, conv and delta states, all in `dev`'s memory); the final
/// hidden rows of each pass.
fn resident_forward(dev: &Device, moe: bool) -> Vec<Out> {
    let dir = tempfile::tempdir().unwrap();
    let spec = if moe {
        SyntheticSpec::tiny_moe()
    } else {
        SyntheticSpec::tiny()
    };
    write_random_model(dir.path(), &spec, 17).unwrap();
    let model = HybridLM::load_on(dir.path(), dev).unwrap();
    let tokens: Vec<u32> = (0..16u32)
        .map(|i| i * 37 % spec.vocab_size as u32)
        .collect();
    let attn = PrefillAttention::dense(dev);
    let mut session = model.new_session(DType::BF16, 32).unwrap();
    let first = model.hidden(&mut session, &tokens[..9], &attn).unwrap();
    let second = model.hidden(&mut session, &tokens[9..], &attn).unwrap();
    vec![Out::F32("pass 1", first), Out::F32("pass 2", second)]
}

/// f32 (into a larger buffer, whose tail must come back zeroed), bf16 and u32 buffers
/// uploaded and downloaded.
fn round_trip(dev: &Device) -> Vec<Out> {
    let x = Rng(7).f32s(1000, 3.0);
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
    let h = Rng(8).f32s(rows * dim, 2.0);
    let wf = Rng(9).f32s(vocab * dim, 0.5);
    let wb: Vec<bf16> = wf.iter().map(|&x| bf16::from_f32(x)).collect();
    // The weight uploaded once, in its dtype.
    let (bf16_buf, f32_buf);
    let weight = if bf16_weight {
        bf16_buf = dev.buffer_from(&wb).unwrap();
        WeightView::Bf16(bf16_buf.view())
    } else {
        f32_buf = dev.buffer_from(&wf).unwrap();
        WeightView::F32(f32_buf.view())
    };
    let mut hidden = dev.alloc::<f32>((rows + 2) * dim).unwrap();
    hidden.upload(&h).unwrap();
    let mut logits = dev.alloc::<f32>((rows + 2) * vocab).unwrap();
    ops::lm_head_dev(
        dev,
        hidden.slice(..rows * dim).unwrap(),
        dim,
        weight,
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

/// `check`'s result, or its panic (a launch that failed inside a case's `unwrap`) as an
/// error, so one failing case does not hide the others' outcomes.
fn caught(check: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        Err(format!("panicked: {text}"))
    })
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
    let mut outcome = |name: String, result: Result<(), String>| match result {
        Ok(()) => println!("{name}: ok ({:?} ms)", gpu.last_gpu_kernel_ms()),
        Err(e) => {
            println!("{name}: FAILED");
            failures.push(format!("{name}: gpu vs cpu: {e}"))
        }
    };
    for case in cases::all() {
        let result = caught(|| case.compare(&case.run(&gpu), &case.run(&cpu), case.tolerance()));
        outcome(case.name(), result);
    }
    for (name, run) in resident_checks() {
        outcome(name, caught(|| compare(&run(&gpu), &run(&cpu), RESIDENT)));
    }
    for (name, moe) in [
        ("resident forward, dense", false),
        ("resident forward, MoE", true),
    ] {
        let result = caught(|| {
            let got = resident_forward(&gpu, moe);
            compare(&got, &resident_forward(&cpu, moe), FORWARD)
        });
        outcome(name.into(), result);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn mismatches_are_detected() {
    let a = [Out::F32("x", vec![1.0, f32::NAN, f32::INFINITY])];
    let same = [Out::F32("x", vec![1.0, f32::NAN, f32::INFINITY])];
    assert!(compare(&a, &same, RESIDENT).is_ok());
    for other in [
        vec![1.01, f32::NAN, f32::INFINITY],
        vec![1.0, 0.0, f32::INFINITY],
        vec![1.0, f32::NAN, f32::NEG_INFINITY],
        vec![1.0, f32::NAN],
    ] {
        assert!(compare(&a, &[Out::F32("x", other)], RESIDENT).is_err());
    }
    let ids = [Out::U32("i", vec![1])];
    assert!(compare(&ids, &[Out::U32("i", vec![2])], RESIDENT).is_err());
    assert!(compare(&ids, &a, RESIDENT).is_err());
    assert!(compare(&ids, &[], RESIDENT).is_err());
}
