//! A whole model on every host level: the llama.cpp BF16 conversion of a golden model, whose
//! activations meet its weights rounded to bf16 (`gemm.xwt_bf16`, the GEMM that runs on
//! `vdpbf16ps` and AMX), scored on the generated-Rust `cpu` device and on every host level
//! this CPU runs, AMX through the emulator where the CPU lacks it.

use lse_runtime::device::{Device, Pool};
use lse_runtime::generator::Generator;
use lse_runtime::model::{DType, HybridLM, PrefillAttention};
use std::path::Path;

/// The final hidden states of a prefill of `tokens` of the model at `path` on `dev`, in
/// passes of 7 tokens (several passes carry the caches and DeltaNet states between them).
fn hidden_on(dev: &Device, path: &Path, tokens: &[u32]) -> Vec<f32> {
    let model = HybridLM::load_on(path, dev).unwrap_or_else(|e| panic!("{e}"));
    let attn = PrefillAttention::dense(dev);
    let mut gen = Generator::new(&model, &attn, DType::F32, tokens.len()).unwrap();
    gen.prefill(tokens, 7, 7).unwrap()
}

/// Each level's hidden states within `TOL` of the `cpu` device's, relative to their largest
/// magnitude. The levels differ only in the GEMM's summation order: the bf16 products are
/// exact in f32 everywhere, so each dot of K terms differs by at most about K 2^-24 of its
/// terms' magnitude (K <= 64 here: about 4e-6), carried through 4 layers and their norms.
/// Observed: 4.8e-7 of 3.5 on the AVX512-BF16 level, 0 on the emulated AMX one (the SDM's
/// order, one fused step per product in K order, is the generated Rust's), 0 on the others.
#[test]
fn a_bf16_gguf_prefill_agrees_on_the_cpu_device_and_every_host_level() {
    const TOL: f32 = 1e-3;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gguf/dense_untied_bf16-bf16.gguf");
    let cpu = Device::open(Pool::Cpu).unwrap();
    let vocab = HybridLM::load_on(&path, &cpu).unwrap().config().vocab_size as u32;
    let tokens: Vec<u32> = (0..29u32).map(|i| (i * 37 + 11) % vocab).collect();
    let want = hidden_on(&cpu, &path, &tokens);
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let hosts = lse_tests::diff::host_variants();
    for host in &hosts {
        let got = hidden_on(host, &path, &tokens);
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        println!(
            "{}: max |dh| = {worst:e} of max |h| = {scale:e}",
            host.arch()
        );
        assert!(worst <= TOL * scale, "{}: {worst:e}", host.arch());
    }
    println!(
        "levels: {:?}",
        hosts.iter().map(|h| h.arch()).collect::<Vec<_>>()
    );
}
