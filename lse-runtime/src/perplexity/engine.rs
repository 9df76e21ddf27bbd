//! The engine: a loaded model on an opened device, serving scoring requests one at a time.

use std::path::PathBuf;

use super::checks::{check_request, effective_settings};
use super::fifo::FifoLock;
use super::head::HEAD_ROWS;
use super::progress::Progress;
use super::run;
use super::settings::{EngineSettings, Input, Request};
use crate::device::{Device, DeviceOpenError, LaunchError};
use crate::model::{GemmActivations, HybridLM, ModelError};
use crate::ops::OpError;
use crate::scoring::{
    KldBaseError, OutputError, PerplexityReport, ReportConfig, RowError, WindowError,
};

/// Everything that can stop a scoring run, each with a message that says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Device(#[from] DeviceOpenError),
    #[error(transparent)]
    Window(#[from] WindowError),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Base(#[from] KldBaseError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("a scored row is unusable: {0}")]
    Row(#[from] RowError),
    #[error(
        "--no-cpu-fallback / LSE_REQUIRE_DEVICE_KERNELS=1: these operations of this model have no kernel for device {device} \
         and would run on the CPU backend: {}",
        ops.join(", ")
    )]
    MissingDeviceKernels { device: String, ops: Vec<String> },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
    #[error("KL-divergence base {0} ended before the last scored token")]
    BaseEnded(String),
}

/// A model loaded on a device, ready to score.
pub struct Engine {
    settings: EngineSettings,
    device: Device,
    model: HybridLM,
    queue: FifoLock,
}

impl Engine {
    /// Checks the settings ([`effective_settings`]: the ubatch is clamped to the batch,
    /// `LSE_REQUIRE_DEVICE_KERNELS` applied), opens the device, checks the kernel
    /// requirement, then loads the model.
    pub fn open(settings: EngineSettings) -> Result<Engine, EngineError> {
        let settings = effective_settings(&settings)?;
        let device = Device::open(settings.pool)?;
        if settings.no_cpu_fallback {
            let is_moe = HybridLM::read_config(&settings.model_dir)?.moe.is_some();
            let missing = missing_device_kernels(&device, is_moe);
            if !missing.is_empty() {
                return Err(EngineError::MissingDeviceKernels {
                    device: device.arch(),
                    ops: missing,
                });
            }
        }
        let model = HybridLM::load_with(&settings.model_dir, &device, settings.gemm_activations)?;
        Ok(Engine {
            settings,
            device,
            model,
            queue: FifoLock::default(),
        })
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    pub fn model(&self) -> &HybridLM {
        &self.model
    }

    /// The device the engine runs on (for [`Device::record_kernel_times`]).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Scores one request. Concurrent calls queue and run in arrival order.
    pub fn perplexity(
        &self,
        request: &Request,
        progress: &dyn Progress,
    ) -> Result<PerplexityReport, EngineError> {
        check_request(&self.settings, request)?;
        let _turn = self.queue.acquire();
        let tokens = match &request.input {
            Input::Text(text) => self.model.encode(text)?,
            Input::Tokens(ids) => ids.clone(),
        };
        if tokens.is_empty() {
            return Err(EngineError::Invalid(match &request.input {
                Input::Text(_) => "the text to score is empty (it tokenizes to no tokens)".into(),
                Input::Tokens(_) => "the token ids to score are an empty list".into(),
            }));
        }
        let vocab = self.model.config().vocab_size;
        if let Some((i, id)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= vocab)
        {
            return Err(EngineError::Invalid(format!(
                "token id {id} at index {i} is outside the model's vocabulary (vocab_size {vocab})"
            )));
        }
        run::run(
            &self.model,
            &self.device,
            &self.settings,
            request,
            &tokens,
            self.report_config(),
            progress,
        )
    }

    fn report_config(&self) -> ReportConfig {
        let s = &self.settings;
        ReportConfig {
            device_arch: self.device.arch(),
            // The run names FlashPrefill V2 here once one of its passes went sparse.
            prefill_attention: "dense".into(),
            // The f32's shortest decimal (what the user wrote), not its binary expansion
            // 0.10000000149011612.
            prefill_attention_scale: s.flashprefill.alpha.to_string().parse().unwrap_or(f64::NAN),
            kv_cache_dtype: s.kv_cache_dtype.as_str().into(),
            gemm_activations: Some(s.gemm_activations).filter(|&a| a != GemmActivations::Reference),
            kv_capacity: s.kv_len as u64,
            batch_size: s.batch_size as u64,
            ubatch_size: s.ubatch_size as u64,
            head_rows: HEAD_ROWS as u64,
            cpu_fallback_allowed: !s.no_cpu_fallback,
        }
    }
}

/// Every operation a scoring run of a dense (`is_moe` false) or mixture-of-experts model needs
/// that has no kernel for `device`.
pub fn missing_device_kernels(device: &Device, is_moe: bool) -> Vec<String> {
    if device.pool() == crate::device::Pool::Cpu {
        // The CPU backend is this device: nothing falls back.
        return Vec::new();
    }
    // The model is not loaded yet, so its head dtype is unknown; the instances of a generic
    // kernel come from one LOOM source and are built together, so the bf16 one stands for all.
    use lse_kernels::attention::{
        block_score, block_select, key_blocks, kv_write, output_gate, prefill, qk_norm_rope,
    };
    use lse_kernels::deltanet;
    let kernels = [
        (
            "embedding",
            &lse_kernels::embedding::embed_tokens_bf16::KERNEL,
        ),
        ("rms_norm", &lse_kernels::norm::rmsnorm::KERNEL),
        (
            "rms_norm (residual add)",
            &lse_kernels::norm::add_rmsnorm::KERNEL,
        ),
        ("q/k norm and rope", &qk_norm_rope::qk_norm_rope::KERNEL),
        ("kv cache write", &kv_write::kv_write_bf16::KERNEL),
        ("attention output gate", &output_gate::output_gate::KERNEL),
        ("swiglu_mlp", &lse_kernels::ffn::swiglu::swiglu::KERNEL),
        ("gated_deltanet (conv)", &deltanet::conv::conv::KERNEL),
        ("gated_deltanet (gates)", &deltanet::gates::gates::KERNEL),
        (
            "gated_deltanet (delta_prep)",
            &deltanet::delta_prep::delta_prep::KERNEL,
        ),
        (
            "gated_deltanet (delta_rule)",
            &deltanet::delta_rule::delta_rule::KERNEL,
        ),
        (
            "gated_deltanet (gated_norm)",
            &deltanet::gated_norm::gated_norm::KERNEL,
        ),
        // The head's matrix form is the GEMM below; one row uses the matrix-vector kernel.
        (
            "lm_head",
            &lse_kernels::lm_head::lm_head_matvec_bf16::KERNEL,
        ),
        ("logits.lse_pick", &lse_kernels::lse_pick::lse_pick::KERNEL),
        ("topk_pairs", &lse_kernels::topk_pairs::topk_pairs::KERNEL),
        (
            "linear projections (gemm)",
            &lse_kernels::gemm::gemm_xwt_exact_bf16::KERNEL,
        ),
        // One kernel serves dense and block-sparse attention.
        ("prefill_attention", &prefill::prefill_bf16::KERNEL),
        (
            "flashprefill (key_block_mean)",
            &key_blocks::key_block_mean_bf16::KERNEL,
        ),
        (
            "flashprefill (block_score)",
            &block_score::block_score::KERNEL,
        ),
        (
            "flashprefill (block_select)",
            &block_select::block_select::KERNEL,
        ),
    ];
    use lse_kernels::ffn::{combine, gather, router};
    let moe = [
        ("moe (router)", &router::moe_router::KERNEL),
        ("moe (gather)", &gather::moe_gather::KERNEL),
        (
            "moe (quantized gather)",
            &lse_kernels::act_quant::gather_rows::KERNEL,
        ),
        ("moe (combine)", &combine::moe_combine::KERNEL),
    ];
    let moe = if is_moe { &moe[..] } else { &[] };
    kernels
        .iter()
        .chain(moe)
        .filter(|(_, k)| !device.has_kernel(k))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The path a report names a base by.
pub(super) fn base_name(path: &std::path::Path) -> String {
    PathBuf::from(path).display().to_string()
}
