//! The C API (`include/lse/lse.h`): the same scoring as `lse perplexity`, in process.
//!
//! Requests and reports travel as JSON strings. No panic crosses the FFI boundary: each entry
//! point catches panics and reports them as `LSE_ERR_PANIC`.

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use serde::Deserialize;

use crate::device::Pool;
use crate::model::GemmActivations;
use crate::perplexity::{Engine, EngineSettings, FlashPrefill, Input, KvDtype, Request, Silent};
use crate::scoring::Method;

const LSE_OK: c_int = 0;
const LSE_ERR_INVALID_ARGUMENT: c_int = 1;
const LSE_ERR_FAILED: c_int = 2;
const LSE_ERR_PANIC: c_int = 3;

/// The opaque `lse_engine`.
pub struct LseEngine(Engine);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineConfig {
    model: PathBuf,
    pool: Option<String>,
    batch_size: Option<usize>,
    ubatch_size: Option<usize>,
    kv_len: Option<usize>,
    kv_cache_dtype: Option<KvDtype>,
    gemm_activations: Option<GemmActivations>,
    flash_prefill_v2: Option<FlashPrefill>,
    prefill_attention_scale: Option<f32>,
    flashprefill_block_size: Option<usize>,
    flashprefill_sink_blocks: Option<usize>,
    flashprefill_window_blocks: Option<usize>,
    flashprefill_last_full_blocks: Option<usize>,
    flashprefill_min_budget: Option<usize>,
    flashprefill_min_kv_len: Option<usize>,
    no_cpu_fallback: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestJson {
    text: Option<String>,
    tokens: Option<Vec<u32>>,
    method: Option<Method>,
    ctx: Option<usize>,
    stride: Option<usize>,
    chunks: Option<usize>,
    kld_base_out: Option<PathBuf>,
    kld_top_k: Option<usize>,
    kld_base: Option<PathBuf>,
    include_windows: Option<bool>,
    include_token_ids: Option<bool>,
    include_token_stats: Option<bool>,
}

struct Failure(c_int, String);

fn invalid(msg: impl Into<String>) -> Failure {
    Failure(LSE_ERR_INVALID_ARGUMENT, msg.into())
}

fn settings_from_json(json: &str) -> Result<EngineSettings, Failure> {
    let c: EngineConfig =
        serde_json::from_str(json).map_err(|e| invalid(format!("engine config JSON: {e}")))?;
    let mut s = EngineSettings::new(c.model);
    if let Some(p) = c.pool {
        s.pool = p
            .parse::<Pool>()
            .map_err(|e| invalid(format!("engine config field \"pool\": {e}")))?;
    }
    s.batch_size = c.batch_size.unwrap_or(s.batch_size);
    s.ubatch_size = c.ubatch_size.unwrap_or(s.ubatch_size);
    s.kv_len = c.kv_len.unwrap_or(s.kv_len);
    s.kv_cache_dtype = c.kv_cache_dtype.unwrap_or(s.kv_cache_dtype);
    s.gemm_activations = c.gemm_activations.unwrap_or(s.gemm_activations);
    s.flash_prefill = c.flash_prefill_v2.unwrap_or(s.flash_prefill);
    let fp = &mut s.flashprefill;
    fp.alpha = c.prefill_attention_scale.unwrap_or(fp.alpha);
    fp.block_size = c.flashprefill_block_size.unwrap_or(fp.block_size);
    fp.sink_blocks = c.flashprefill_sink_blocks.unwrap_or(fp.sink_blocks);
    fp.window_blocks = c.flashprefill_window_blocks.unwrap_or(fp.window_blocks);
    fp.last_full_blocks = c
        .flashprefill_last_full_blocks
        .unwrap_or(fp.last_full_blocks);
    fp.min_budget = c.flashprefill_min_budget.unwrap_or(fp.min_budget);
    s.flashprefill_min_kv_len = c
        .flashprefill_min_kv_len
        .unwrap_or(s.flashprefill_min_kv_len);
    s.no_cpu_fallback |= c.no_cpu_fallback.unwrap_or(false);
    Ok(s)
}

fn request_from_json(json: &str) -> Result<Request, Failure> {
    let r: RequestJson =
        serde_json::from_str(json).map_err(|e| invalid(format!("request JSON: {e}")))?;
    let input = match (r.text, r.tokens) {
        (Some(t), None) => Input::Text(t),
        (None, Some(ids)) => Input::Tokens(ids),
        _ => {
            return Err(invalid(
                "request JSON: give exactly one of \"text\" and \"tokens\"",
            ))
        }
    };
    let mut req = Request::new(input);
    req.method = r.method.unwrap_or(req.method);
    req.ctx = r.ctx.unwrap_or(req.ctx);
    req.stride = r.stride;
    req.chunks = r.chunks;
    req.kld_base_out = r.kld_base_out;
    req.kld_top_k = r.kld_top_k;
    req.kld_base = r.kld_base;
    req.include_windows = r.include_windows.unwrap_or(true);
    req.include_token_ids = r.include_token_ids.unwrap_or(false);
    req.include_token_stats = r.include_token_stats.unwrap_or(false);
    Ok(req)
}

/// Reads a NUL-terminated UTF-8 argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn arg_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    CStr::from_ptr(p)
        .to_str()
        .map_err(|_| invalid(format!("{what} is not valid UTF-8")))
}

fn into_c_string(s: String) -> *mut c_char {
    // Interior NULs cannot occur in JSON output or our messages; replace defensively.
    CString::new(s.replace('\0', " ")).map_or(std::ptr::null_mut(), CString::into_raw)
}

/// Runs `f`, turning failures and panics into a code and an optional message in `*err`.
///
/// # Safety
/// `err` is NULL or a valid place to store a string pointer.
unsafe fn guarded(err: *mut *mut c_char, f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Failure(
            LSE_ERR_PANIC,
            "internal error (panic) in LSE".into(),
        ))
    });
    match outcome {
        Ok(()) => LSE_OK,
        Err(Failure(code, msg)) => {
            if !err.is_null() {
                *err = into_c_string(msg);
            }
            code
        }
    }
}

/// See `lse_engine_open` in `lse.h`.
///
/// # Safety
/// Pointers as documented in the header.
#[no_mangle]
pub unsafe extern "C" fn lse_engine_open(
    config_json: *const c_char,
    out: *mut *mut LseEngine,
    err: *mut *mut c_char,
) -> c_int {
    guarded(err, || {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let settings = settings_from_json(arg_str(config_json, "config_json")?)?;
        let engine = Engine::open(settings).map_err(|e| Failure(LSE_ERR_FAILED, e.to_string()))?;
        *out = Box::into_raw(Box::new(LseEngine(engine)));
        Ok(())
    })
}

/// See `lse_perplexity` in `lse.h`.
///
/// # Safety
/// Pointers as documented in the header; `engine` came from `lse_engine_open` and is open.
#[no_mangle]
pub unsafe extern "C" fn lse_perplexity(
    engine: *mut LseEngine,
    request_json: *const c_char,
    json_out: *mut *mut c_char,
    err: *mut *mut c_char,
) -> c_int {
    guarded(err, || {
        if engine.is_null() || json_out.is_null() {
            return Err(invalid("engine and json_out must not be NULL"));
        }
        let request = request_from_json(arg_str(request_json, "request_json")?)?;
        let engine = &(*engine).0;
        let report = engine
            .perplexity(&request, &Silent)
            .map_err(|e| Failure(LSE_ERR_FAILED, e.to_string()))?;
        let json = report.to_json().map_err(|e| {
            Failure(
                LSE_ERR_FAILED,
                format!("could not serialise the report: {e}"),
            )
        })?;
        *json_out = into_c_string(json);
        Ok(())
    })
}

/// See `lse_string_free` in `lse.h`.
///
/// # Safety
/// `s` is NULL or a string this API returned, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn lse_string_free(s: *mut c_char) {
    if !s.is_null() {
        drop(CString::from_raw(s));
    }
}

/// See `lse_engine_close` in `lse.h`.
///
/// # Safety
/// `engine` is NULL or an open engine with no call in flight.
#[no_mangle]
pub unsafe extern "C" fn lse_engine_close(engine: *mut LseEngine) {
    if !engine.is_null() {
        drop(Box::from_raw(engine));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_needs_exactly_one_input() {
        for json in [r#"{}"#, r#"{"text":"a","tokens":[1]}"#] {
            let Err(Failure(code, msg)) = request_from_json(json) else {
                panic!("accepted {json}")
            };
            assert_eq!(code, LSE_ERR_INVALID_ARGUMENT);
            assert!(msg.contains("exactly one of"), "{msg}");
        }
    }

    #[test]
    fn request_output_options_default_and_are_read() {
        let Ok(r) = request_from_json(r#"{"text":"a"}"#) else {
            panic!()
        };
        assert!(r.include_windows && !r.include_token_ids && !r.include_token_stats);
        let Ok(r) = request_from_json(
            r#"{"text":"a","include_windows":false,"include_token_ids":true,"include_token_stats":true}"#,
        ) else {
            panic!()
        };
        assert!(!r.include_windows && r.include_token_ids && r.include_token_stats);
    }

    #[test]
    fn unknown_request_fields_are_named() {
        let Err(Failure(_, msg)) = request_from_json(r#"{"text":"a","ctxx":5}"#) else {
            panic!()
        };
        assert!(msg.contains("ctxx"), "{msg}");
    }

    #[test]
    fn engine_config_pool_errors_name_the_field() {
        let Err(Failure(_, msg)) = settings_from_json(r#"{"model":"m","pool":"gpu"}"#) else {
            panic!()
        };
        assert!(msg.contains("\"pool\""), "{msg}");
    }

    #[test]
    fn engine_config_sets_every_flashprefill_option() {
        let Ok(s) = settings_from_json(
            r#"{"model":"m","flash_prefill_v2":"on","prefill_attention_scale":0.2,
                "flashprefill_block_size":256,"flashprefill_sink_blocks":1,
                "flashprefill_window_blocks":3,"flashprefill_last_full_blocks":0,
                "flashprefill_min_budget":5,"flashprefill_min_kv_len":9000}"#,
        ) else {
            panic!()
        };
        assert_eq!(s.flash_prefill, FlashPrefill::On);
        let want = crate::ops::FlashPrefillParams {
            block_size: 256,
            alpha: 0.2,
            sink_blocks: 1,
            window_blocks: 3,
            last_full_blocks: 0,
            min_budget: 5,
        };
        assert_eq!(s.flashprefill, want);
        assert_eq!(s.flashprefill_min_kv_len, 9000);
    }

    #[test]
    fn engine_config_reads_gemm_activations_and_names_a_bad_value() {
        let s = |json: &str| settings_from_json(json).map(|s| s.gemm_activations);
        assert!(matches!(
            s(r#"{"model":"m"}"#),
            Ok(GemmActivations::Reference)
        ));
        assert!(matches!(
            s(r#"{"model":"m","gemm_activations":"weight-dtype"}"#),
            Ok(GemmActivations::WeightDtype)
        ));
        assert!(matches!(
            s(r#"{"model":"m","gemm_activations":"bf16x3"}"#),
            Ok(GemmActivations::Bf16x3)
        ));
        let Err(Failure(code, msg)) = s(r#"{"model":"m","gemm_activations":"bf16"}"#) else {
            panic!()
        };
        assert_eq!(code, LSE_ERR_INVALID_ARGUMENT);
        assert!(
            msg.contains("bf16") && msg.contains("weight-dtype"),
            "{msg}"
        );
    }
}
