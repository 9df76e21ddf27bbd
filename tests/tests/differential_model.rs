//! A whole model on every host level: the llama.cpp BF16 conversion of a golden model, whose
//! activations meet its weights rounded to bf16 (`gemm.xwt_bf16`, the GEMM that runs on
//! `vdpbf16ps` and AMX), scored on the generated-Rust `cpu` device and on every host level
//! this CPU runs, AMX through the emulator where the CPU lacks it.

use lse_runtime::device::{Device, Pool};
use lse_runtime::generator::Generator;
use lse_runtime::model::{DType, GemmActivations, HybridLM, PrefillAttention};
use std::path::Path;

/// The final hidden states of a prefill of `tokens` of the model at `path` on `dev`, in
/// passes of 7 tokens (several passes carry the caches and DeltaNet states between them).
fn hidden_on(dev: &Device, path: &Path, tokens: &[u32]) -> Vec<f32> {
    let model = HybridLM::load_on(path, dev).unwrap_or_else(|e| panic!("{e}"));
    let attn = PrefillAttention::dense(dev);
    let mut gen = Generator::new(&model, &attn, DType::F32, tokens.len()).unwrap();
    gen.prefill(tokens, 7, 7).unwrap()
}

/// The largest and the mean absolute difference between `got` and `want`.
fn distance(got: &[f32], want: &[f32]) -> (f32, f32) {
    assert_eq!(got.len(), want.len());
    let diffs = got.iter().zip(want).map(|(g, w)| (g - w).abs());
    let max = diffs.clone().fold(0f32, f32::max);
    (max, diffs.sum::<f32>() / got.len() as f32)
}

/// Each level's hidden states within `TOL` of the `cpu` device's, relative to their largest
/// magnitude, where the level keeps the generated Rust's summation order: the bf16 products
/// are exact in f32 everywhere, so each dot of K terms differs by at most about K 2^-24 of its
/// terms' magnitude (K <= 64 here: about 4e-6), carried through 4 layers and their norms.
/// Observed: 0 on every level of an AVX-512/AMX Xeon but native AMX, 4.8e-7 on Zen 5's
/// AVX512-BF16 level, 0 on the emulated AMX one (the SDM's order, one rounding per product
/// in K order, is the generated Rust's).
///
/// Native AMX sums a tile dot in its own order (on a Xeon, 2026-12-07: 43% of the elements
/// of random 16 x 16 x 32 `tdpbf16ps` differ from the SDM's order, with the same error
/// against an exact sum, 8.8e-8 of the terms' magnitudes, and no bias). Every GEMM's input is
/// rounded to bf16 here, so an ulp of difference flips the rounding of a few activations,
/// whose 2^-9 steps flip more in the next layers: the states then differ at the scale of the
/// rounding itself. On that level the distance to the `cpu` device's states must stay under
/// half of the rounding's own effect (the distance between the BF16 and the F32 conversion's
/// states on the `cpu` device), for the largest and the mean difference. Observed there:
/// 2.7e-2 and 1.6e-3, against 1.0e-1 and 1.1e-2 (0.27 and 0.15 of them); a wrong tile or a
/// lost K step moves states by their own size.
#[test]
fn a_bf16_gguf_prefill_agrees_on_the_cpu_device_and_every_host_level() {
    const TOL: f32 = 1e-3;
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gguf");
    let path = data.join("dense_untied_bf16-bf16.gguf");
    let cpu = Device::open(Pool::Cpu).unwrap();
    let vocab = HybridLM::load_on(&path, &cpu).unwrap().config().vocab_size as u32;
    let tokens: Vec<u32> = (0..29u32).map(|i| (i * 37 + 11) % vocab).collect();
    let want = hidden_on(&cpu, &path, &tokens);
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let unrounded = hidden_on(&cpu, &data.join("dense_untied_bf16-f32.gguf"), &tokens);
    let rounding = distance(&unrounded, &want);
    println!(
        "rounding to bf16: max |dh| = {:e}, mean {:e}",
        rounding.0, rounding.1
    );
    let native_amx = lse_amx_emu::install() == lse_amx_emu::Amx::Native;
    let hosts = lse_tests::diff::host_variants();
    for host in &hosts {
        let (worst, mean) = distance(&hidden_on(host, &path, &tokens), &want);
        println!(
            "{}: max |dh| = {worst:e} of max |h| = {scale:e}, mean |dh| = {mean:e}",
            host.arch()
        );
        if native_amx && host.arch() == "host-x86-64-v4-amx" {
            assert!(
                worst <= rounding.0 / 2.0 && mean <= rounding.1 / 2.0,
                "{}: {worst:e}, mean {mean:e}",
                host.arch()
            );
        } else {
            assert!(worst <= TOL * scale, "{}: {worst:e}", host.arch());
        }
    }
    println!(
        "levels: {:?}",
        hosts.iter().map(|h| h.arch()).collect::<Vec<_>>()
    );
}

/// The golden Hugging Face bf16 model under `--gemm-activations bf16x3`, prefilled in one pass
/// of 40 tokens (past the 32 rows from which its products take the pieces' kernels on AMX),
/// on every host level against the `cpu` device, which takes the f32 path. Every product is
/// exact either way and the states stay f32 (an f32 KV cache), so they differ only by the
/// order of f32 sums: the largest difference within `TOL` of the largest state and the mean
/// within `MEAN_TOL` (the emulated AMX level sums in the SDM's order, another one). Observed
/// on a native AMX Xeon (2026-12-08): 2.9e-6 and 3.2e-7 of it (0 on the other levels, which
/// take the f32 path); with the last piece dropped, 4.7e-5 and 5.7e-6.
#[test]
fn a_bf16_model_under_bf16x3_keeps_the_f32_states_on_every_host_level() {
    const TOL: f32 = 1.5e-5;
    const MEAN_TOL: f32 = 2e-6;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/models/dense_untied_bf16");
    let cpu = Device::open(Pool::Cpu).unwrap();
    let run = |dev: &Device| {
        let model = HybridLM::load_with(&path, dev, GemmActivations::Bf16x3).unwrap();
        let vocab = model.config().vocab_size as u32;
        let tokens: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % vocab).collect();
        let attn = PrefillAttention::dense(dev);
        let mut gen = Generator::new(&model, &attn, DType::F32, tokens.len()).unwrap();
        gen.prefill(&tokens, 40, 40).unwrap()
    };
    let want = run(&cpu);
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    lse_amx_emu::install();
    for host in &lse_tests::diff::host_variants() {
        let (worst, mean) = distance(&run(host), &want);
        println!(
            "{}: max |dh| = {worst:e} of max |h| = {scale:e}, mean |dh| = {mean:e}",
            host.arch()
        );
        assert!(
            worst <= TOL * scale && mean <= MEAN_TOL * scale,
            "{}: {worst:e}, mean {mean:e}",
            host.arch()
        );
    }
}
