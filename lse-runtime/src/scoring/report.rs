//! The `lse.perplexity` JSON report, field for field as in the product brief, and the
//! token-id hash that identifies what was scored.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::kld_table::KldTable;
use super::stats::{KldSummary, PplAccumulator};
use super::windows::{Method, Window};
use crate::model::GemmActivations;

/// The report's `object` value.
pub const REPORT_OBJECT: &str = "lse.perplexity";

/// SHA-256 of the token ids as little-endian u32s (the raw 32 bytes).
pub fn token_ids_digest(ids: &[u32]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for chunk in ids.chunks(4096) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|id| id.to_le_bytes()).collect();
        hasher.update(&bytes);
    }
    hasher.finalize().into()
}

/// SHA-256 of the token ids as little-endian u32s, in lower-case hex (`token_ids_sha256`).
pub fn token_ids_sha256(ids: &[u32]) -> String {
    token_ids_digest(ids)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Tokens per second, 0 when no time elapsed.
pub fn rate(tokens: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        0.0
    }
}

/// The whole `lse perplexity` output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerplexityReport {
    /// Always [`REPORT_OBJECT`].
    pub object: String,
    /// Tokens in the text.
    pub tokens: u64,
    /// [`token_ids_sha256`] of the text's tokens.
    pub token_ids_sha256: String,
    /// Windowing method.
    pub method: Method,
    /// Tokens per chunk or window.
    pub ctx: u64,
    /// Tokens between window starts (the ctx for chunks).
    pub stride: u64,
    /// Chunks or windows scored.
    pub windows_scored: u64,
    /// Tokens scored.
    pub scored_tokens: u64,
    /// Mean NLL in nats per scored token.
    pub mean_nll: f64,
    /// exp(mean_nll).
    pub perplexity: f64,
    /// llama.cpp's "±".
    pub perplexity_uncertainty: f64,
    /// Wall time of the scoring run.
    pub elapsed_seconds: f64,
    /// Every token sent through prefill, context included.
    pub prefill_tokens: u64,
    /// prefill_tokens / elapsed_seconds.
    pub prefill_tokens_per_second: f64,
    /// Kept over causal key blocks of the FlashPrefill V2 passes (every full-attention layer,
    /// every KV head); `None` when every pass ran dense. Not a JSON field (the brief fixes
    /// those); the CLI prints it.
    #[serde(skip)]
    pub prefill_attention_density: Option<f64>,
    /// The engine settings the score reflects.
    pub config: ReportConfig,
    /// Comparison against a KL-divergence base, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kld: Option<KldReport>,
    /// Added to the brief's fields: llama.cpp's full KL-divergence table, when comparing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kld_statistics: Option<KldTable>,
    /// Per-window results, unless left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<WindowReport>>,
    /// The text's token ids, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Added to the brief's fields: per-scored-token values, when asked for
    /// (`--perplexity-token-stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_stats: Option<TokenStats>,
}

/// The `token_stats` object: one entry per scored token, in scoring order (window by
/// window, each window's targets in text order), as f32.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenStats {
    /// NLL of each scored token (nats).
    pub nll: Vec<f32>,
    /// KL divergence against the base of each token, when comparing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kld: Option<Vec<f32>>,
    /// Δp (p − p_base of the correct token) of each token, when comparing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_p: Option<Vec<f32>>,
}

/// The `config` block: the serving settings the scoring ran with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportConfig {
    /// Device architecture, e.g. `gfx1201`, or `cpu`.
    pub device_arch: String,
    /// `flashprefill-v2` when at least one prefill pass ran FlashPrefill V2, else `dense`.
    pub prefill_attention: String,
    /// FlashPrefill V2's block-selection threshold alpha (`--prefill-attention-scale`).
    pub prefill_attention_scale: f64,
    /// KV cache element type, e.g. `bf16`.
    pub kv_cache_dtype: String,
    /// `--gemm-activations` when not the default `reference` (`weight-dtype`); absent, as in
    /// the brief's report, when the products followed the checkpoint's reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_activations: Option<GemmActivations>,
    /// KV cache capacity in tokens (`--kv-len`).
    pub kv_capacity: u64,
    /// `--batch-size`.
    pub batch_size: u64,
    /// `--ubatch-size`.
    pub ubatch_size: u64,
    /// Rows the LM head processes at a time.
    pub head_rows: u64,
    /// Whether operations without a device kernel may run on the CPU.
    pub cpu_fallback_allowed: bool,
}

/// The `kld` block: which base, then the statistics in the brief's order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KldReport {
    /// The base file as given on the command line.
    pub base: String,
    /// Ids per scored token in the base.
    pub top_k: u32,
    /// Tokens compared.
    pub tokens: u64,
    /// The statistics, flattened into this object.
    #[serde(flatten)]
    pub stats: KldSummary,
}

impl KldReport {
    /// Builds the block from the base's name, its top-k, the tokens compared and the stats.
    pub fn new(base: &str, top_k: u32, tokens: u64, s: &KldSummary) -> KldReport {
        KldReport {
            base: base.to_string(),
            top_k,
            tokens,
            stats: *s,
        }
    }
}

/// One entry of `windows`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// Window index.
    pub index: u64,
    /// First token fed (index in the text).
    pub begin: u64,
    /// One past the last token fed.
    pub end: u64,
    /// First scored token (index in the text).
    pub first_target: u64,
    /// Tokens scored.
    pub scored: u64,
    /// Σ NLL over the window's scored tokens.
    pub nll_sum: f64,
    /// nll_sum / scored.
    pub mean_nll: f64,
    /// exp(mean_nll).
    pub perplexity: f64,
    /// Wall time spent on this window.
    pub seconds: f64,
}

impl WindowReport {
    /// The entry for `window` whose scored tokens were accumulated in `acc`.
    pub fn new(window: &Window, acc: &PplAccumulator, seconds: f64) -> WindowReport {
        WindowReport {
            index: window.index as u64,
            begin: window.begin as u64,
            end: window.end as u64,
            first_target: window.first_target as u64,
            scored: window.scored as u64,
            nll_sum: acc.sum,
            mean_nll: acc.mean_nll(),
            perplexity: acc.perplexity(),
            seconds,
        }
    }
}

impl PerplexityReport {
    /// Pretty-printed JSON followed by a newline.
    pub fn to_json(&self) -> serde_json::Result<String> {
        let mut s = serde_json::to_string_pretty(self)?;
        s.push('\n');
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn token_hash_known_values() {
        // SHA-256 of the empty input.
        assert_eq!(
            token_ids_sha256(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // [1] is the bytes 01 00 00 00; [0x64636261] is "abcd".
        let mut h = Sha256::new();
        h.update([1u8, 0, 0, 0]);
        let expect: [u8; 32] = h.finalize().into();
        assert_eq!(token_ids_digest(&[1]), expect);
        assert_eq!(
            token_ids_sha256(&[0x6463_6261]),
            "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"
        );
        // Chunked hashing equals hashing the whole byte string.
        let ids: Vec<u32> = (0..10_000).collect();
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        let whole: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(token_ids_digest(&ids), whole);
        assert_eq!(token_ids_sha256(&ids).len(), 64);
    }

    #[test]
    fn rate_handles_zero_time() {
        assert_eq!(rate(100, 0.0), 0.0);
        assert_eq!(rate(100, 4.0), 25.0);
    }

    fn sample(kld: bool, token_ids: bool) -> PerplexityReport {
        let window = Window {
            index: 0,
            begin: 0,
            end: 512,
            first_target: 257,
            scored: 255,
        };
        let mut acc = PplAccumulator::default();
        for _ in 0..255 {
            acc.add(2.0);
        }
        PerplexityReport {
            object: REPORT_OBJECT.to_string(),
            tokens: 1024,
            token_ids_sha256: token_ids_sha256(&[1, 2, 3]),
            method: Method::Chunks,
            ctx: 512,
            stride: 512,
            windows_scored: 1,
            scored_tokens: 255,
            mean_nll: acc.mean_nll(),
            perplexity: acc.perplexity(),
            perplexity_uncertainty: acc.perplexity_uncertainty(),
            elapsed_seconds: 2.0,
            prefill_tokens: 512,
            prefill_tokens_per_second: rate(512, 2.0),
            prefill_attention_density: Some(0.5),
            config: ReportConfig {
                device_arch: "gfx1201".into(),
                prefill_attention: "flashprefill-v2".into(),
                prefill_attention_scale: 0.1,
                kv_cache_dtype: "bf16".into(),
                gemm_activations: None,
                kv_capacity: 262_100,
                batch_size: 1024,
                ubatch_size: 1024,
                head_rows: 128,
                cpu_fallback_allowed: false,
            },
            kld: kld.then(|| KldReport::new("dense.kld", 32, 255, &KldSummary::default())),
            windows: Some(vec![WindowReport::new(&window, &acc, 2.0)]),
            token_ids: token_ids.then(|| vec![1, 2, 3]),
            kld_statistics: None,
            token_stats: None,
        }
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[test]
    fn json_fields_and_order_match_the_brief() {
        let json = sample(true, true).to_json().unwrap();
        assert!(json.ends_with("}\n"));
        let v: Value = serde_json::from_str(&json).unwrap();
        // serde_json without preserve_order sorts keys; check the order in the text too.
        let top = [
            "object",
            "tokens",
            "token_ids_sha256",
            "method",
            "ctx",
            "stride",
            "windows_scored",
            "scored_tokens",
            "mean_nll",
            "perplexity",
            "perplexity_uncertainty",
            "elapsed_seconds",
            "prefill_tokens",
            "prefill_tokens_per_second",
            "config",
            "kld",
            "windows",
            "token_ids",
        ];
        let mut sorted_top = top.to_vec();
        sorted_top.sort_unstable();
        let mut got = keys(&v);
        got.sort_unstable();
        assert_eq!(got, sorted_top);
        let positions: Vec<usize> = top
            .iter()
            .map(|k| json.find(&format!("\n  \"{k}\":")).unwrap())
            .collect();
        assert!(positions.windows(2).all(|p| p[0] < p[1]), "{json}");

        assert_eq!(v["object"], "lse.perplexity");
        assert_eq!(v["method"], "chunks");
        assert_eq!(v["prefill_tokens_per_second"], 256.0);
        assert_eq!(v["mean_nll"], 2.0);
        let mut config = keys(&v["config"]);
        config.sort_unstable();
        assert_eq!(
            config,
            [
                "batch_size",
                "cpu_fallback_allowed",
                "device_arch",
                "head_rows",
                "kv_cache_dtype",
                "kv_capacity",
                "prefill_attention",
                "prefill_attention_scale",
                "ubatch_size"
            ]
        );
        let mut kld = keys(&v["kld"]);
        kld.sort_unstable();
        assert_eq!(
            kld,
            [
                "base",
                "base_perplexity",
                "delta_perplexity",
                "kld_max",
                "kld_p99",
                "mean_base_top_mass",
                "mean_delta_p",
                "mean_delta_p_uncertainty",
                "mean_kld",
                "mean_kld_uncertainty",
                "mean_log_ratio",
                "mean_log_ratio_uncertainty",
                "perplexity",
                "perplexity_ratio",
                "rms_delta_p",
                "same_top",
                "same_top_uncertainty",
                "tokens",
                "top_k"
            ]
        );
        assert_eq!(v["kld"]["base"], "dense.kld");
        let w = &v["windows"][0];
        assert_eq!(w["first_target"], 257);
        assert_eq!(w["scored"], 255);
        assert_eq!(w["nll_sum"], 510.0);
        assert_eq!(w["perplexity"], 2f64.exp());
        assert_eq!(v["token_ids"], serde_json::json!([1, 2, 3]));
        // Round trip; the density is printed by the CLI, not part of the JSON.
        assert!(!json.contains("density"));
        let back: PerplexityReport = serde_json::from_str(&json).unwrap();
        let mut want = sample(true, true);
        want.prefill_attention_density = None;
        assert_eq!(back, want);
    }

    #[test]
    fn gemm_activations_appear_in_the_config_only_when_not_the_reference() {
        let mut r = sample(false, false);
        r.prefill_attention_density = None;
        for (act, name) in [
            (GemmActivations::WeightDtype, "weight-dtype"),
            (GemmActivations::Bf16x3, "bf16x3"),
        ] {
            r.config.gemm_activations = Some(act);
            let json = r.to_json().unwrap();
            let v: Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["config"]["gemm_activations"], name);
            let back: PerplexityReport = serde_json::from_str(&json).unwrap();
            assert_eq!(back, r);
        }
        // A report of the brief's shape (no such field) reads back as the reference.
        r.config.gemm_activations = None;
        let json = r.to_json().unwrap();
        assert!(!json.contains("gemm_activations"), "{json}");
        let back: PerplexityReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.config.gemm_activations, None);
        // Any other value is refused, naming the ones there are.
        let bad = json.replace(
            "\"kv_cache_dtype\": \"bf16\",",
            "\"kv_cache_dtype\": \"bf16\", \"gemm_activations\": \"fast\",",
        );
        let err = serde_json::from_str::<PerplexityReport>(&bad).unwrap_err();
        assert!(
            err.to_string().contains(
                "unknown variant `fast`, expected one of `reference`, `weight-dtype`, `bf16x3`"
            ),
            "{err}"
        );
    }

    #[test]
    fn added_objects_follow_the_brief_fields_and_round_trip() {
        let mut r = sample(true, true);
        r.prefill_attention_density = None;
        r.kld_statistics = Some(KldTable {
            tokens: 255,
            ln_ppl_correlation: Some(0.5),
            ..KldTable::default()
        });
        r.token_stats = Some(TokenStats {
            nll: vec![2.0; 255],
            kld: Some(vec![0.25; 255]),
            delta_p: None,
        });
        let json = r.to_json().unwrap();
        let at = |k: &str| json.find(&format!("\n  \"{k}\":")).unwrap();
        assert!(at("kld") < at("kld_statistics") && at("kld_statistics") < at("windows"));
        assert!(at("token_ids") < at("token_stats"));
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["kld_statistics"]["ln_ppl_correlation"], 0.5);
        assert_eq!(v["kld_statistics"]["kld_quantiles"]["p99.9"], 0.0);
        assert_eq!(v["token_stats"]["kld"][254], 0.25);
        assert!(v["token_stats"].get("delta_p").is_none());
        let back: PerplexityReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn optional_blocks_are_omitted() {
        let mut r = sample(false, false);
        r.windows = None;
        let v: Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        let obj = v.as_object().unwrap();
        assert!(!obj.contains_key("kld"));
        assert!(!obj.contains_key("token_ids"));
        assert!(!obj.contains_key("windows"));
        let back: PerplexityReport = serde_json::from_value(v).unwrap();
        r.prefill_attention_density = None;
        assert_eq!(back, r);
    }
}
