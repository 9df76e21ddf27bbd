//! Differential cases of the scoring kernels (`lse_pick`, `topk_pairs`, the LM head,
//! [`lse_tests::cases::scoring`]) on the shared harness [`lse_tests::diff`].

use lse_tests::cases::scoring;
use lse_tests::diff::run_cases;

#[test]
fn every_kernel_agrees_across_generated_rust_llvm_host_and_reference() {
    run_cases(scoring::cases());
}

/// The LOOM GEMM ([`lse_tests::cases::gemm`]): every host level, generated Rust and an f64
/// reference.
#[test]
fn gemm_agrees_across_generated_rust_every_host_level_and_reference() {
    run_cases(lse_tests::cases::gemm::cases());
}

/// The residual stream's kernels ([`lse_tests::cases::norm`]): the embedding and the norms.
#[test]
fn embedding_and_norms_agree_across_generated_rust_every_host_level_and_reference() {
    run_cases(lse_tests::cases::norm::cases());
}

/// The attention layer's steps around attention ([`lse_tests::cases::attention_layer`]).
#[test]
fn attention_layer_steps_agree_across_generated_rust_every_host_level_and_reference() {
    run_cases(lse_tests::cases::attention_layer::cases());
}

/// The feed-forward kernels (SwiGLU, the MoE router, gather and combine) and the routed-experts
/// path of the MoE block ([`lse_tests::cases::ffn`]): every host level, generated Rust and the
/// plain-Rust references.
#[test]
fn ffn_agrees_across_generated_rust_every_host_level_and_reference() {
    run_cases(lse_tests::cases::ffn::cases());
}

/// The Gated DeltaNet kernels ([`lse_tests::cases::deltanet`]): conv, gates, chunked delta
/// rule with states carried across passes, gated norm; every host level, generated Rust and
/// f64 references.
#[test]
fn deltanet_agrees_across_generated_rust_every_host_level_and_reference() {
    run_cases(lse_tests::cases::deltanet::cases());
}

/// llama.cpp's activation quantization ([`lse_tests::cases::act_quant`]): every host level,
/// generated Rust and transcriptions of ggml's code, bit for bit.
#[test]
fn activation_quantization_agrees_across_generated_rust_every_host_level_and_ggml() {
    run_cases(lse_tests::cases::act_quant::cases());
}
