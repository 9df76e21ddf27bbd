//! Parsing `config.json` for the Qwen3.5 family (dense and MoE, VL wrapper or text-only).
//!
//! The multimodal model types (`qwen3_5`, `qwen3_5_moe`) keep the text fields under
//! `text_config`; the text-only types keep them at the top level. Every field error names
//! the file, the dotted field path, what was expected and what was found.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{ModelError, Result};
pub use crate::ops::VHeadOrder;

/// Kind of token mixer in one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet linear attention.
    Linear,
    /// Gated softmax attention with a KV cache.
    Full,
}

/// Mixture-of-experts sizes (present only for `qwen3_5_moe*`).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Number of routed experts E.
    pub num_experts: usize,
    /// Experts used per token k.
    pub num_experts_per_tok: usize,
    /// Routed expert FFN width Im.
    pub moe_intermediate_size: usize,
    /// Shared expert FFN width Is.
    pub shared_expert_intermediate_size: usize,
}

/// The text-model hyper-parameters LSE needs for prefill.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The `model_type` string from the file.
    pub model_type: String,
    /// True for the VL wrapper types (`qwen3_5`, `qwen3_5_moe`).
    pub multimodal_wrapper: bool,
    /// V: embedding / LM-head rows.
    pub vocab_size: usize,
    /// H.
    pub hidden_size: usize,
    /// Per-layer mixer kind; its length is num_hidden_layers.
    pub layer_types: Vec<LayerKind>,
    /// nH.
    pub num_attention_heads: usize,
    /// nKV.
    pub num_key_value_heads: usize,
    /// hd.
    pub head_dim: usize,
    /// Dense MLP width I (0 for MoE models).
    pub intermediate_size: usize,
    /// RMSNorm epsilon used by every norm.
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Fraction of head_dim that is rotated.
    pub partial_rotary_factor: f64,
    /// Kc.
    pub linear_conv_kernel_dim: usize,
    /// dk.
    pub linear_key_head_dim: usize,
    /// dv.
    pub linear_value_head_dim: usize,
    /// Hk.
    pub linear_num_key_heads: usize,
    /// Hv.
    pub linear_num_value_heads: usize,
    /// How the value-side weights order the DeltaNet value heads: grouped in Hugging Face
    /// checkpoints, tiled in llama.cpp's GGUF files.
    pub linear_value_head_order: VHeadOrder,
    /// Whether the LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// MoE sizes, or None for a dense MLP.
    pub moe: Option<MoeConfig>,
}

/// The JSON of `path` (a config.json), with errors naming it: a missing file, an I/O error,
/// malformed JSON.
pub fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ModelError::MissingFile {
                path: path.to_path_buf(),
                what: "model config".into(),
            }
        } else {
            ModelError::io(path, e)
        }
    })?;
    parse_json(&text, path)
}

fn parse_json(text: &str, path: &Path) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

impl ModelConfig {
    /// Number of decoder layers L.
    pub fn num_layers(&self) -> usize {
        self.layer_types.len()
    }
    /// Rotated dims per head: `int(hd * partial_rotary_factor)`.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }
    /// Kd = Hk·dk.
    pub fn key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }
    /// Vd = Hv·dv.
    pub fn value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }
    /// conv_dim = 2·Kd + Vd.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        Self::from_value(&read_json(path)?, path)
    }

    /// Parses config JSON text; `path` is used only in error messages.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        Self::from_value(&parse_json(text, path)?, path)
    }

    /// Validates parsed config JSON (a config.json's, or one derived from other metadata);
    /// `path` is used only in error messages.
    pub fn from_value(root: &Value, path: &Path) -> Result<Self> {
        let r = Reader {
            path: path.to_path_buf(),
        };
        if !root.is_object() {
            return Err(ModelError::ConfigRoot {
                path: path.to_path_buf(),
                found: describe(root),
            });
        }
        let model_type = r.string(root, "", "model_type")?;
        let (wrapper, is_moe) = match model_type.as_str() {
            "qwen3_5" => (true, false),
            "qwen3_5_text" => (false, false),
            "qwen3_5_moe" => (true, true),
            "qwen3_5_moe_text" => (false, true),
            _ => {
                return Err(ModelError::UnsupportedModelType {
                    path: path.to_path_buf(),
                    model_type,
                })
            }
        };
        let (tc, pre) = if wrapper {
            match root.get("text_config") {
                Some(v) if v.is_object() => (v, "text_config."),
                Some(v) => return Err(r.err("text_config", "a JSON object", v)),
                None => return Err(r.missing("text_config", "a JSON object")),
            }
        } else {
            (root, "")
        };
        let u = |name: &str| r.usize(tc, pre, name);
        let vocab_size = u("vocab_size")?;
        let hidden_size = u("hidden_size")?;
        let num_layers = u("num_hidden_layers")?;
        let num_attention_heads = u("num_attention_heads")?;
        let num_key_value_heads = u("num_key_value_heads")?;
        let head_dim = match tc.get("head_dim") {
            None | Some(Value::Null) => hidden_size / num_attention_heads,
            Some(_) => u("head_dim")?,
        };
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(r.err(
                &format!("{pre}num_key_value_heads"),
                &format!("a divisor of num_attention_heads ({num_attention_heads})"),
                &Value::from(num_key_value_heads),
            ));
        }
        if r.opt_bool(tc, pre, "attention_bias")?.unwrap_or(false) {
            return Err(r.err(
                &format!("{pre}attention_bias"),
                "false (attention biases are not supported)",
                &Value::Bool(true),
            ));
        }
        if r.opt_bool(tc, pre, "attn_output_gate")? == Some(false) {
            return Err(r.err(
                &format!("{pre}attn_output_gate"),
                "true (Qwen3.5 attention is always gated)",
                &Value::Bool(false),
            ));
        }
        let rms_norm_eps = r.opt_f64(tc, pre, "rms_norm_eps")?.unwrap_or(1e-6);
        // RoPE: prefer rope_parameters, fall back to top-level fields.
        let rope = tc.get("rope_parameters").filter(|v| v.is_object());
        let rpre = format!("{pre}rope_parameters.");
        let rope_theta = match rope.map(|o| r.opt_f64(o, &rpre, "rope_theta")) {
            Some(Ok(Some(v))) => v,
            Some(Err(e)) => return Err(e),
            _ => r
                .opt_f64(tc, pre, "rope_theta")?
                .ok_or_else(|| r.missing(&format!("{rpre}rope_theta"), "a number"))?,
        };
        let partial_rotary_factor = match rope.map(|o| r.opt_f64(o, &rpre, "partial_rotary_factor"))
        {
            Some(Ok(Some(v))) => v,
            Some(Err(e)) => return Err(e),
            _ => r.opt_f64(tc, pre, "partial_rotary_factor")?.unwrap_or(0.25),
        };
        if let Some(Ok(Some(t))) = rope.map(|o| r.opt_string(o, &rpre, "rope_type")) {
            if t != "default" {
                return Err(r.err(
                    &format!("{rpre}rope_type"),
                    "\"default\"",
                    &Value::String(t),
                ));
            }
        }
        let layer_types = match tc.get("layer_types") {
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    out.push(match it.as_str() {
                        Some("linear_attention") => LayerKind::Linear,
                        Some("full_attention") => LayerKind::Full,
                        _ => {
                            return Err(r.err(
                                &format!("{pre}layer_types[{i}]"),
                                "\"linear_attention\" or \"full_attention\"",
                                it,
                            ))
                        }
                    });
                }
                if out.len() != num_layers {
                    return Err(r.err(
                        &format!("{pre}layer_types"),
                        &format!("{num_layers} entries (num_hidden_layers)"),
                        &Value::from(out.len()),
                    ));
                }
                out
            }
            Some(v) if !v.is_null() => {
                return Err(r.err(&format!("{pre}layer_types"), "an array of strings", v))
            }
            _ => {
                let interval = r
                    .opt_usize(tc, pre, "full_attention_interval")?
                    .unwrap_or(4);
                (0..num_layers)
                    .map(|i| {
                        if (i + 1) % interval == 0 {
                            LayerKind::Full
                        } else {
                            LayerKind::Linear
                        }
                    })
                    .collect()
            }
        };
        let linear_conv_kernel_dim = r.opt_usize(tc, pre, "linear_conv_kernel_dim")?.unwrap_or(4);
        let linear_key_head_dim = u("linear_key_head_dim")?;
        let linear_value_head_dim = u("linear_value_head_dim")?;
        let linear_num_key_heads = u("linear_num_key_heads")?;
        let linear_num_value_heads = u("linear_num_value_heads")?;
        if linear_num_value_heads % linear_num_key_heads != 0 {
            return Err(r.err(
                &format!("{pre}linear_num_value_heads"),
                &format!("a multiple of linear_num_key_heads ({linear_num_key_heads})"),
                &Value::from(linear_num_value_heads),
            ));
        }
        let tie_word_embeddings = match r.opt_bool(root, "", "tie_word_embeddings")? {
            Some(b) => b,
            None if wrapper => r.opt_bool(tc, pre, "tie_word_embeddings")?.unwrap_or(false),
            None => false,
        };
        let (moe, intermediate_size) = if is_moe {
            let m = MoeConfig {
                num_experts: u("num_experts")?,
                num_experts_per_tok: u("num_experts_per_tok")?,
                moe_intermediate_size: u("moe_intermediate_size")?,
                shared_expert_intermediate_size: u("shared_expert_intermediate_size")?,
            };
            if m.num_experts_per_tok > m.num_experts {
                return Err(r.err(
                    &format!("{pre}num_experts_per_tok"),
                    &format!("at most num_experts ({})", m.num_experts),
                    &Value::from(m.num_experts_per_tok),
                ));
            }
            (Some(m), 0)
        } else {
            (None, u("intermediate_size")?)
        };
        let cfg = ModelConfig {
            model_type,
            multimodal_wrapper: wrapper,
            vocab_size,
            hidden_size,
            layer_types,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            intermediate_size,
            rms_norm_eps,
            rope_theta,
            partial_rotary_factor,
            linear_conv_kernel_dim,
            linear_key_head_dim,
            linear_value_head_dim,
            linear_num_key_heads,
            linear_num_value_heads,
            linear_value_head_order: VHeadOrder::Grouped,
            tie_word_embeddings,
            moe,
        };
        let rot = cfg.rotary_dim();
        if rot % 2 == 1 || rot > cfg.head_dim {
            return Err(r.err(
                &format!("{rpre}partial_rotary_factor"),
                "a factor giving an even rotary dim <= head_dim",
                &Value::from(partial_rotary_factor),
            ));
        }
        cfg.check_products(&r, pre)?;
        Ok(cfg)
    }

    /// Refuses sizes whose products (the largest weight and state tensors, in bytes) do not
    /// fit this machine's `usize`, so later size arithmetic cannot overflow.
    fn check_products(&self, r: &Reader, pre: &str) -> Result<()> {
        let product =
            |fields: &[usize]| fields.iter().try_fold(4usize, |acc, &f| acc.checked_mul(f));
        let mut checks: Vec<(&str, Option<usize>)> = vec![
            (
                "vocab_size × hidden_size",
                product(&[self.vocab_size, self.hidden_size]),
            ),
            (
                "linear_num_value_heads × linear_key_head_dim × linear_value_head_dim",
                product(&[
                    self.linear_num_value_heads,
                    self.linear_key_head_dim,
                    self.linear_value_head_dim,
                ]),
            ),
            (
                "linear_conv_kernel_dim × conv dim",
                product(&[
                    self.linear_conv_kernel_dim,
                    self.conv_dim(),
                    self.hidden_size,
                ]),
            ),
            (
                "num_attention_heads × head_dim × hidden_size",
                product(&[
                    self.num_attention_heads,
                    2 * self.head_dim,
                    self.hidden_size,
                ]),
            ),
            (
                "intermediate_size × hidden_size",
                product(&[3, self.intermediate_size, self.hidden_size]),
            ),
        ];
        if let Some(m) = &self.moe {
            checks.push((
                "num_experts × moe_intermediate_size × hidden_size",
                product(&[3, m.num_experts, m.moe_intermediate_size, self.hidden_size]),
            ));
            checks.push((
                "shared_expert_intermediate_size × hidden_size",
                product(&[3, m.shared_expert_intermediate_size, self.hidden_size]),
            ));
        }
        match checks.into_iter().find(|(_, p)| p.is_none()) {
            Some((what, _)) => Err(r.err(
                &format!("{pre}hidden_size"),
                &format!("sizes whose product {what} (in bytes) fits in memory"),
                &Value::from(self.hidden_size),
            )),
            None => Ok(()),
        }
    }
}

/// Field reader that produces path-qualified errors.
struct Reader {
    path: PathBuf,
}

/// The largest value a size field may hold: larger ones are not a model this crate can
/// load, and products of such sizes must not overflow.
pub const MAX_SIZE_FIELD: u64 = 1 << 24;

/// The most decoder layers a config may declare.
pub const MAX_LAYERS: u64 = 4096;

/// A JSON value for a message: its first 60 characters.
fn describe(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

impl Reader {
    fn err(&self, field: &str, expected: &str, found: &Value) -> ModelError {
        ModelError::ConfigField {
            path: self.path.clone(),
            field: field.to_string(),
            expected: expected.to_string(),
            found: describe(found),
        }
    }
    fn missing(&self, field: &str, expected: &str) -> ModelError {
        ModelError::ConfigField {
            path: self.path.clone(),
            field: field.to_string(),
            expected: expected.to_string(),
            found: "nothing (field is missing)".into(),
        }
    }
    fn get<'a>(&self, obj: &'a Value, pre: &str, name: &str, exp: &str) -> Result<&'a Value> {
        match obj.get(name) {
            Some(v) if !v.is_null() => Ok(v),
            _ => Err(self.missing(&format!("{pre}{name}"), exp)),
        }
    }
    fn string(&self, obj: &Value, pre: &str, name: &str) -> Result<String> {
        let v = self.get(obj, pre, name, "a string")?;
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| self.err(&format!("{pre}{name}"), "a string", v))
    }
    fn opt_string(&self, obj: &Value, pre: &str, name: &str) -> Result<Option<String>> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(obj, pre, name).map(Some),
        }
    }
    fn usize(&self, obj: &Value, pre: &str, name: &str) -> Result<usize> {
        let max = if name == "num_hidden_layers" {
            MAX_LAYERS
        } else {
            MAX_SIZE_FIELD
        };
        let exp = format!("a positive integer (at most {max})");
        let v = self.get(obj, pre, name, &exp)?;
        match v.as_u64() {
            Some(n) if n > 0 && n <= max => {
                usize::try_from(n).map_err(|_| self.err(&format!("{pre}{name}"), &exp, v))
            }
            _ => Err(self.err(&format!("{pre}{name}"), &exp, v)),
        }
    }
    fn opt_usize(&self, obj: &Value, pre: &str, name: &str) -> Result<Option<usize>> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.usize(obj, pre, name).map(Some),
        }
    }
    fn opt_f64(&self, obj: &Value, pre: &str, name: &str) -> Result<Option<f64>> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(self.err(&format!("{pre}{name}"), "a positive number", v)),
            },
        }
    }
    fn opt_bool(&self, obj: &Value, pre: &str, name: &str) -> Result<Option<bool>> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(&format!("{pre}{name}"), "true or false", v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_cfg() -> serde_json::Value {
        serde_json::json!({
            "model_type": "qwen3_5_text",
            "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 64, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "tie_word_embeddings": true
        })
    }

    fn parse(v: &serde_json::Value) -> Result<ModelConfig> {
        ModelConfig::from_json_str(&v.to_string(), Path::new("dir/config.json"))
    }

    #[test]
    fn parses_text_config_and_derives_layer_types() {
        let c = parse(&text_cfg()).unwrap();
        assert_eq!(c.layer_types[3], LayerKind::Full);
        assert_eq!(c.layer_types[0], LayerKind::Linear);
        assert_eq!(c.rotary_dim(), 4);
        assert_eq!(c.conv_dim(), 2 * 16 + 32);
        assert!(c.tie_word_embeddings);
    }

    #[test]
    fn parses_wrapper_with_text_config_and_top_level_tie() {
        let mut tc = text_cfg();
        tc["tie_word_embeddings"] = true.into();
        let v = serde_json::json!({"model_type": "qwen3_5", "text_config": tc, "tie_word_embeddings": false});
        let c = parse(&v).unwrap();
        assert!(c.multimodal_wrapper);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn missing_field_is_named() {
        let mut v = text_cfg();
        v.as_object_mut().unwrap().remove("hidden_size");
        let e = parse(&v).unwrap_err().to_string();
        assert!(
            e.contains("dir/config.json") && e.contains("`hidden_size`") && e.contains("missing"),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_is_named_with_expected_and_found() {
        let mut v = text_cfg();
        v["num_attention_heads"] = "four".into();
        let e = parse(&v).unwrap_err().to_string();
        assert!(
            e.contains("`num_attention_heads`")
                && e.contains("positive integer")
                && e.contains("\"four\""),
            "{e}"
        );
    }

    #[test]
    fn unsupported_model_type() {
        let mut v = text_cfg();
        v["model_type"] = "llama".into();
        let e = parse(&v).unwrap_err().to_string();
        assert!(e.contains("unsupported model_type `llama`"), "{e}");
    }

    #[test]
    fn malformed_json_reports_serde_message() {
        let e = ModelConfig::from_json_str("{\"a\": ", Path::new("x/config.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x/config.json: malformed JSON") && e.contains("line 1"),
            "{e}"
        );
    }

    #[test]
    fn bad_layer_type_entry() {
        let mut v = text_cfg();
        v["layer_types"] = serde_json::json!([
            "linear_attention",
            "sliding",
            "linear_attention",
            "full_attention"
        ]);
        let e = parse(&v).unwrap_err().to_string();
        assert!(
            e.contains("layer_types[1]") && e.contains("\"sliding\""),
            "{e}"
        );
    }

    #[test]
    fn moe_fields_required_for_moe() {
        let mut v = text_cfg();
        v["model_type"] = "qwen3_5_moe_text".into();
        let e = parse(&v).unwrap_err().to_string();
        assert!(e.contains("`num_experts`"), "{e}");
    }
}
