//! The serving options scoring runs under, and what one scoring request asks for.

use std::path::PathBuf;

use serde::Deserialize;

use crate::device::Pool;
use crate::model::{GemmActivations, SparseWhen};
use crate::ops::FlashPrefillParams;
use crate::scoring::windows::Method;

/// KV cache element type (`--kv-cache-dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    Bf16,
    F16,
    F32,
}

impl KvDtype {
    pub fn as_str(self) -> &'static str {
        match self {
            KvDtype::Bf16 => "bf16",
            KvDtype::F16 => "f16",
            KvDtype::F32 => "f32",
        }
    }

    /// The model's storage type of this dtype.
    pub fn dtype(self) -> crate::model::DType {
        match self {
            KvDtype::Bf16 => crate::model::DType::BF16,
            KvDtype::F16 => crate::model::DType::F16,
            KvDtype::F32 => crate::model::DType::F32,
        }
    }

    /// Parses `bf16`, `f16` or `f32`.
    pub fn parse(s: &str) -> Option<KvDtype> {
        match s {
            "bf16" => Some(KvDtype::Bf16),
            "f16" => Some(KvDtype::F16),
            "f32" => Some(KvDtype::F32),
            _ => None,
        }
    }
}

/// `--FlashPrefillV2`: sparse prefill attention on, off, or the engine's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashPrefill {
    Auto,
    On,
    Off,
}

/// The cut-over of `--FlashPrefillV2` unset: passes whose attention reads fewer cache rows run
/// dense (`cargo bench -p lse-runtime --bench attention` measures where sparse starts to win).
pub const DEFAULT_FLASHPREFILL_MIN_KV_LEN: usize = 2048;

impl FlashPrefill {
    /// When a run under this setting goes sparse, given the auto cut-over.
    pub fn sparse_when(self, min_kv_len: usize) -> SparseWhen {
        match self {
            FlashPrefill::Auto => SparseWhen::FromKvLen(min_kv_len),
            FlashPrefill::On => SparseWhen::Always,
            FlashPrefill::Off => SparseWhen::Never,
        }
    }
}

/// How the engine serves: the options shared by serving and scoring.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// Hugging Face model directory.
    pub model_dir: PathBuf,
    pub pool: Pool,
    /// Logical batch: the most tokens one decode call takes (llama.cpp `-b`).
    pub batch_size: usize,
    /// Physical batch: the most tokens one compute pass takes (llama.cpp `-ub`).
    pub ubatch_size: usize,
    pub kv_cache_dtype: KvDtype,
    /// How activations meet 16-bit float weights (`--gemm-activations`).
    pub gemm_activations: GemmActivations,
    /// KV cache capacity in tokens; every window must fit.
    pub kv_len: usize,
    pub flash_prefill: FlashPrefill,
    /// FlashPrefill V2's selection parameters (alpha is `--prefill-attention-scale`).
    pub flashprefill: FlashPrefillParams,
    /// With `--FlashPrefillV2` unset, passes whose attention reads at least this many cache
    /// rows run sparse (`--flashprefill-min-kv-len`).
    pub flashprefill_min_kv_len: usize,
    /// Refuse to run operations without a kernel for the device (`--no-cpu-fallback`;
    /// [`crate::perplexity::Engine::open`] adds `LSE_REQUIRE_DEVICE_KERNELS=1`).
    pub no_cpu_fallback: bool,
}

impl EngineSettings {
    /// Defaults for everything but the model: `host` device, batch 2048 and ubatch 512
    /// (llama.cpp's defaults), bf16 KV cache of 8192 tokens, the checkpoint's reference
    /// activations, FlashPrefill V2 with its published parameters for passes reading at least
    /// [`DEFAULT_FLASHPREFILL_MIN_KV_LEN`] cache rows.
    pub fn new(model_dir: PathBuf) -> EngineSettings {
        EngineSettings {
            model_dir,
            pool: Pool::Host,
            batch_size: 2048,
            ubatch_size: 512,
            kv_cache_dtype: KvDtype::Bf16,
            gemm_activations: GemmActivations::Reference,
            kv_len: 8192,
            flash_prefill: FlashPrefill::Auto,
            flashprefill: FlashPrefillParams::default(),
            flashprefill_min_kv_len: DEFAULT_FLASHPREFILL_MIN_KV_LEN,
            no_cpu_fallback: false,
        }
    }
}

/// What to score: text or token ids.
#[derive(Clone, Debug)]
pub enum Input {
    /// UTF-8 text, tokenized whole, as a prompt is.
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
}

/// One perplexity request (the CLI's `--perplexity*` options, the C API's request JSON).
#[derive(Clone, Debug)]
pub struct Request {
    pub input: Input,
    pub method: Method,
    /// Tokens per chunk or window.
    pub ctx: usize,
    /// Sliding only: tokens between window starts; `None` = ctx.
    pub stride: Option<usize>,
    /// Score only the first N chunks or windows.
    pub chunks: Option<usize>,
    /// Record a KL-divergence base here.
    pub kld_base_out: Option<PathBuf>,
    /// Ids recorded per scored token in a base (1..=32; `None`: 32). A comparison uses the
    /// base's; one given here must agree with it.
    pub kld_top_k: Option<usize>,
    /// Compare against this base.
    pub kld_base: Option<PathBuf>,
    pub include_windows: bool,
    pub include_token_ids: bool,
    /// Include the per-token NLL (and, when comparing, KLD and Δp) as `token_stats`.
    pub include_token_stats: bool,
}

impl Request {
    /// A chunks request at ctx 512 with no KL divergence, llama.cpp's defaults.
    pub fn new(input: Input) -> Request {
        Request {
            input,
            method: Method::Chunks,
            ctx: 512,
            stride: None,
            chunks: None,
            kld_base_out: None,
            kld_top_k: None,
            kld_base: None,
            include_windows: true,
            include_token_ids: false,
            include_token_stats: false,
        }
    }
}
