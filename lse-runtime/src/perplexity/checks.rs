//! The checks of settings and requests that need neither the model nor the text, run before
//! anything is loaded: sizes, the window settings, the KL-divergence options and files, and
//! the `LSE_REQUIRE_DEVICE_KERNELS` environment variable.

use super::engine::EngineError;
use super::settings::{EngineSettings, Request};
use crate::scoring::kld_base::MAX_TOP_K;
use crate::scoring::{check_regular_writable, KldBaseReader, WindowPlan};

/// The environment variable that asks for `--no-cpu-fallback`.
pub const REQUIRE_DEVICE_KERNELS_ENV: &str = "LSE_REQUIRE_DEVICE_KERNELS";

/// Reads `LSE_REQUIRE_DEVICE_KERNELS`: `1` asks for device kernels only, `0` or unset does
/// not; any other value is an error (a typo must not silently allow the CPU fallback).
pub fn require_device_kernels_env() -> Result<bool, EngineError> {
    match std::env::var(REQUIRE_DEVICE_KERNELS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(v) if v == "1" => Ok(true),
        Ok(v) if v == "0" => Ok(false),
        Ok(v) => Err(EngineError::Invalid(format!(
            "{REQUIRE_DEVICE_KERNELS_ENV}={v:?}: expected 1 (refuse operations without a device \
             kernel, as --no-cpu-fallback) or 0 (allow them); unset means 0"
        ))),
        Err(std::env::VarError::NotUnicode(v)) => Err(EngineError::Invalid(format!(
            "{REQUIRE_DEVICE_KERNELS_ENV}={v:?}: expected 1 or 0"
        ))),
    }
}

/// Checks `settings` and returns them as they will run: `LSE_REQUIRE_DEVICE_KERNELS`
/// applied, and an `--ubatch-size` above `--batch-size` clamped to it (as llama.cpp does).
pub fn effective_settings(settings: &EngineSettings) -> Result<EngineSettings, EngineError> {
    if settings.batch_size == 0 || settings.ubatch_size == 0 || settings.kv_len == 0 {
        return Err(EngineError::Invalid(
            "--batch-size, --ubatch-size and --kv-len must be at least 1".into(),
        ));
    }
    crate::ops::validate_flashprefill_params(&settings.flashprefill)
        .map_err(EngineError::Invalid)?;
    let mut s = settings.clone();
    s.no_cpu_fallback |= require_device_kernels_env()?;
    s.ubatch_size = s.ubatch_size.min(s.batch_size);
    Ok(s)
}

/// Checks a request against the settings before the model loads or the text is tokenized:
/// the window settings, ctx against `--kv-len`, the KL-divergence options, that a base to
/// record can be written and that a base to compare against is whole and valid.
pub fn check_request(settings: &EngineSettings, request: &Request) -> Result<(), EngineError> {
    let stride = request.stride.unwrap_or(request.ctx);
    WindowPlan::check_settings(request.method, request.ctx, stride, request.chunks)?;
    if request.ctx > settings.kv_len {
        return Err(EngineError::Invalid(format!(
            "--perplexity-ctx {} does not fit --kv-len {}: each chunk or window must fit the KV cache",
            request.ctx, settings.kv_len
        )));
    }
    if let Some(k) = request.kld_top_k {
        if k == 0 || k > MAX_TOP_K as usize {
            return Err(EngineError::Invalid(format!(
                "--perplexity-kld-top-k {k} must be in 1..={MAX_TOP_K}"
            )));
        }
    }
    match (&request.kld_base_out, &request.kld_base) {
        (Some(_), Some(_)) => Err(EngineError::Invalid(
            "--perplexity-kld-base-out and --perplexity-kld cannot be combined: record a base in one run, compare in another".into(),
        )),
        (Some(out), None) => Ok(check_regular_writable(out)?),
        (None, Some(base)) => {
            let reader = KldBaseReader::open(base)?;
            check_top_k(request, reader.header().top_k, base)
        }
        (None, None) => Ok(()),
    }
}

/// Refuses a `--perplexity-kld-top-k` that disagrees with the base's.
pub fn check_top_k(
    request: &Request,
    base_top_k: u32,
    base: &std::path::Path,
) -> Result<(), EngineError> {
    match request.kld_top_k {
        Some(k) if k != base_top_k as usize => Err(EngineError::Invalid(format!(
            "--perplexity-kld-top-k {k} disagrees with the KL-divergence base {}, recorded with \
             top-k {base_top_k}: omit the option (a comparison uses the base's top-k) or record \
             the base again with --perplexity-kld-top-k {k}",
            base.display()
        ))),
        _ => Ok(()),
    }
}
