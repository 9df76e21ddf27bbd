//! Prefill throughput on a random Qwen3.5-0.8B-shaped model (bf16 weights, bf16 KV).
//!
//! Run: `cargo bench -p lse-runtime --bench prefill` (set LSE_BENCH_CTX=512,8192 to choose
//! context lengths, LSE_BENCH_UBATCH for the pass size, default 512). Prints tokens/s per
//! context and the process's peak RSS (VmHWM).

use std::sync::OnceLock;
use std::time::Instant;

use lse_runtime::device::{Device, Pool};
use lse_runtime::generator::Generator;
use lse_runtime::model::synthetic::{write_random_model, SyntheticSpec};
use lse_runtime::model::{DType, HybridLM, PrefillAttention};

/// Dense prefill attention on the host device, shared by every test.
fn dense() -> &'static PrefillAttention<'static> {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    static ATTN: OnceLock<PrefillAttention<'static>> = OnceLock::new();
    ATTN.get_or_init(|| {
        PrefillAttention::dense(DEVICE.get_or_init(|| Device::open(Pool::Host).unwrap()))
    })
}

fn vm_hwm() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let ctxs: Vec<usize> = std::env::var("LSE_BENCH_CTX")
        .unwrap_or_else(|_| "512,8192".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let ubatch: usize = std::env::var("LSE_BENCH_UBATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = SyntheticSpec::qwen35_0_8b();
    let t0 = Instant::now();
    write_random_model(dir.path(), &spec, 7).expect("write model");
    println!(
        "wrote 0.8B-shaped random model in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let model = HybridLM::load(dir.path()).expect("load model");
    println!(
        "threads: {}, ubatch {ubatch}, RSS after load {}",
        rayon::current_num_threads(),
        vm_hwm()
    );
    for ctx in ctxs {
        let tokens: Vec<u32> = (0..ctx as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 8) % spec.vocab_size as u32)
            .collect();
        let mut g = Generator::new(&model, dense(), DType::BF16, ctx).expect("session");
        let t = Instant::now();
        let h = g.prefill(&tokens, 2048, ubatch).expect("prefill");
        let s = t.elapsed().as_secs_f64();
        assert!(h.iter().all(|x| x.is_finite()), "non-finite hidden state");
        println!(
            "ctx {ctx}: {:.1} s, {:.1} tokens/s (hidden only, no LM head), peak RSS {}",
            s,
            ctx as f64 / s,
            vm_hwm()
        );
    }
}
