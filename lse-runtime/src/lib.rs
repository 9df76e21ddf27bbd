//! LSE runtime: the devices LOOM kernels run on, the Qwen3.5 model and its prefill, and
//! perplexity / KL-divergence scoring through the device kernels, from Rust or C.

/// The C API (`include/lse/lse.h`).
pub mod capi;
/// Devices that run LOOM kernels (`--pool`).
pub mod device;
/// Every parser of untrusted bytes behind one entry point each, for the fuzzers and tests.
pub mod fuzz_targets;
/// Prefill planning (llama.cpp batch/ubatch passes) and pass execution.
pub mod generator;
/// Qwen3.5 hybrid model: loading, KV cache and CPU prefill.
pub mod model;
/// Typed, shape-checked entry points for the scoring kernels.
pub mod ops;
/// The perplexity engine shared by the CLI and the C API.
pub mod perplexity;
/// Scoring arithmetic for `lse perplexity`: windows, statistics, KLD base file, JSON report.
pub mod scoring;
