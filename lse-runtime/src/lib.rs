//! LSE runtime: the devices LOOM kernels run on, the Qwen3.5 model and its prefill, and
//! perplexity / KL-divergence scoring through the device kernels, from Rust or C.

pub mod capi;
pub mod device;
pub mod fuzz_targets;
pub mod generator;
pub mod model;
pub mod ops;
pub mod perplexity;
pub mod scoring;
