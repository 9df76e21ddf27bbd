//! A llama.cpp GGUF checkpoint of the `qwen35` or `qwen35moe` architecture (one file, or a
//! split set `name-00001-of-0000N.gguf`) read as the model reads a Hugging Face directory: the
//! config from the GGUF metadata, the tensors under their Hugging Face names.
//!
//! llama.cpp's converter changes some tensors; the model follows its conventions rather than
//! undoing them ([`Conventions::LlamaCpp`]): the norm weights with the 1 added, the decay rate
//! `ssm_a = -exp(A_log)`, the value heads in tiled order ([`VHeadOrder::Tiled`]); the conv
//! weight squeezed to `[conv_dim, kc]` is viewed as the checkpoint's `[conv_dim, 1, kc]`; the
//! fused experts come split into stacked gate and up tensors. Every tensor is read where it is
//! mapped: F32, F16 and BF16 in their dtype, the quantized types in their block format, which
//! LOOM kernels read in place ([`crate::ops::QuantFormat`]).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::file::{GgufFile, GgufTensorInfo, GgufValue};
use super::quants::GgmlType;
use crate::model::config::{ModelConfig, VHeadOrder, MAX_LAYERS};
use crate::model::error::{ModelError, Result};
use crate::model::weights::{Blob, Conventions, Entry, WeightStore};
use crate::ops::Activations;

/// The architectures LSE reads (`general.architecture`).
const ARCHITECTURES: [&str; 2] = ["qwen35", "qwen35moe"];

/// True when `path` names a GGUF file (by its extension).
pub fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// The files of the checkpoint `path` names: itself, or every part of its split set when its
/// name ends in `-00001-of-0000N.gguf` (N parts, each checked to exist).
fn part_paths(path: &Path) -> Result<Vec<PathBuf>> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let Some((stem, count)) = split_name(name) else {
        return Ok(vec![path.to_path_buf()]);
    };
    let parts: Vec<PathBuf> = (1..=count)
        .map(|i| path.with_file_name(format!("{stem}-{i:05}-of-{count:05}.gguf")))
        .collect();
    if let Some(missing) = parts.iter().find(|p| !p.is_file()) {
        return Err(ModelError::MissingFile {
            path: missing.clone(),
            what: format!("part of the split GGUF checkpoint {}", path.display()),
        });
    }
    Ok(parts)
}

/// `("name", n)` for a split part's file name `name-0000i-of-0000n.gguf`.
fn split_name(name: &str) -> Option<(&str, usize)> {
    let rest = name.strip_suffix(".gguf")?;
    let (head, count) = rest.rsplit_once("-of-")?;
    let (stem, index) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(count) || !digits(index) {
        return None;
    }
    let count: usize = count.parse().ok()?;
    (count >= 1).then_some((stem, count))
}

/// An opened GGUF checkpoint: its config, its tensors by Hugging Face name, and its files
/// (the first holds the tokenizer).
pub struct GgufCheckpoint {
    /// The text model's hyper-parameters.
    pub config: ModelConfig,
    /// The tensors, under the names [`crate::model::HybridLM`] loads.
    pub weights: WeightStore,
    /// The parts, in order.
    pub files: Vec<GgufFile>,
}

impl GgufCheckpoint {
    /// Opens `path` (and the rest of its split set), reads the config from its metadata and
    /// maps its tensors (every one read where it is mapped, the quantized ones in their block
    /// format).
    pub fn open(path: &Path) -> Result<Self> {
        let files = part_paths(path)?
            .iter()
            .map(|p| GgufFile::open(p))
            .collect::<Result<Vec<_>>>()?;
        let config = Self::config_of(&files[0])?;
        let mut weights = WeightStore::empty(path, Conventions::LlamaCpp);
        for f in &files {
            add_tensors(f, &config, &mut weights);
        }
        Ok(GgufCheckpoint {
            config,
            weights,
            files,
        })
    }

    /// Reads only the config of the checkpoint `path` (its first file's metadata).
    pub fn read_config(path: &Path) -> Result<ModelConfig> {
        Self::config_of(&GgufFile::open(&part_paths(path)?[0])?)
    }

    /// The config in an opened GGUF file's metadata, checked by the same rules as a
    /// config.json's (an error names the GGUF key a config.json field came from).
    pub fn config_of(f: &GgufFile) -> Result<ModelConfig> {
        read_config(f)
    }
}

/// Which checkpoints a config.json field of [`KEYS`] is read for.
#[derive(Clone, Copy, PartialEq)]
enum Needed {
    /// Every checkpoint.
    Always,
    /// Dense ones (`qwen35`).
    Dense,
    /// MoE ones (`qwen35moe`).
    Moe,
    /// None as such: the field is computed from other keys (errors still name the key).
    Derived,
}

/// The metadata keys the config comes from, beside the config.json field each stands for
/// (errors name the key) and when it is read.
const KEYS: [(&str, &str, Needed); 14] = [
    ("hidden_size", "embedding_length", Needed::Always),
    (
        "num_attention_heads",
        "attention.head_count",
        Needed::Always,
    ),
    (
        "num_key_value_heads",
        "attention.head_count_kv",
        Needed::Always,
    ),
    ("head_dim", "attention.key_length", Needed::Always),
    ("intermediate_size", "feed_forward_length", Needed::Dense),
    ("linear_conv_kernel_dim", "ssm.conv_kernel", Needed::Always),
    ("linear_key_head_dim", "ssm.state_size", Needed::Always),
    ("linear_num_key_heads", "ssm.group_count", Needed::Always),
    (
        "linear_num_value_heads",
        "ssm.time_step_rank",
        Needed::Always,
    ),
    ("linear_value_head_dim", "ssm.inner_size", Needed::Derived),
    ("num_experts", "expert_count", Needed::Moe),
    ("num_experts_per_tok", "expert_used_count", Needed::Moe),
    (
        "moe_intermediate_size",
        "expert_feed_forward_length",
        Needed::Moe,
    ),
    (
        "shared_expert_intermediate_size",
        "expert_shared_feed_forward_length",
        Needed::Moe,
    ),
];

/// The config of a qwen35 / qwen35moe GGUF, checked by the same rules as a config.json's (an
/// error names the GGUF key a config.json field came from).
fn read_config(f: &GgufFile) -> Result<ModelConfig> {
    let arch = f.str_of("general.architecture")?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(ModelError::ConfigField {
            path: f.path().to_path_buf(),
            field: "general.architecture".into(),
            expected: format!("one of {}", ARCHITECTURES.join(", ")),
            found: format!("{arch:?}"),
        });
    }
    let moe = arch == "qwen35moe";
    let key = |k: &str| format!("{arch}.{k}");
    let int = |k: &str| -> Result<usize> {
        let v = f.u64_of(&key(k))?;
        usize::try_from(v).map_err(|_| ModelError::ConfigField {
            path: f.path().to_path_buf(),
            field: key(k),
            expected: "a size that fits this machine's usize".into(),
            found: v.to_string(),
        })
    };
    let opt_int = |k: &str| -> Result<Option<usize>> {
        match f.get(&key(k)) {
            None => Ok(None),
            Some(_) => int(k).map(Some),
        }
    };
    let blocks = int("block_count")?;
    // The layer list below is built from the count: bound it first, as a config.json's
    // `num_hidden_layers` is (a fuzzed file declaring 4,278,190,080 blocks made it allocate
    // 64 GB).
    if blocks as u64 > MAX_LAYERS {
        return Err(ModelError::ConfigField {
            path: f.path().to_path_buf(),
            field: key("block_count"),
            expected: format!("at most {MAX_LAYERS} blocks"),
            found: blocks.to_string(),
        });
    }
    let mtp = opt_int("nextn_predict_layers")?.unwrap_or(0);
    let layers = blocks
        .checked_sub(mtp)
        .ok_or_else(|| ModelError::ConfigField {
            path: f.path().to_path_buf(),
            field: key("nextn_predict_layers"),
            expected: format!("at most {} ({})", blocks, key("block_count")),
            found: mtp.to_string(),
        })?;
    let layer_types: Vec<&str> = match f.get(&key("attention.recurrent_layers")) {
        Some(_) => {
            let flags = f.array_of(&key("attention.recurrent_layers"))?;
            if flags.len() < layers {
                return Err(ModelError::ConfigField {
                    path: f.path().to_path_buf(),
                    field: key("attention.recurrent_layers"),
                    expected: format!("{layers} booleans (one per layer)"),
                    found: format!("{} values", flags.len()),
                });
            }
            flags[..layers]
                .iter()
                .map(|v| match v {
                    GgufValue::Bool(true) => Ok("linear_attention"),
                    GgufValue::Bool(false) => Ok("full_attention"),
                    other => Err(ModelError::ConfigField {
                        path: f.path().to_path_buf(),
                        field: key("attention.recurrent_layers"),
                        expected: "an array of booleans".into(),
                        found: format!("a {}", other.type_name()),
                    }),
                })
                .collect::<Result<_>>()?
        }
        None => {
            let interval = opt_int("full_attention_interval")?.unwrap_or(4).max(1);
            (0..layers)
                .map(|i| {
                    if (i + 1) % interval == 0 {
                        "full_attention"
                    } else {
                        "linear_attention"
                    }
                })
                .collect()
        }
    };
    let embed = f
        .tensor("token_embd.weight")
        .ok_or_else(|| ModelError::MissingTensor {
            path: f.path().to_path_buf(),
            tensor: "token_embd.weight".into(),
        })?;
    let vocab = match f.get(&key("vocab_size")) {
        Some(_) => int("vocab_size")?,
        None => embed.ne.get(1).map_or(0, |&v| v as usize),
    };
    let head_dim = int("attention.key_length")?;
    let rot = int("rope.dimension_count")?;
    let hv = int("ssm.time_step_rank")?;
    let inner = int("ssm.inner_size")?;
    if hv == 0 || inner % hv != 0 {
        return Err(ModelError::ConfigField {
            path: f.path().to_path_buf(),
            field: key("ssm.inner_size"),
            expected: format!(
                "a positive multiple of {} ({hv})",
                key("ssm.time_step_rank")
            ),
            found: inner.to_string(),
        });
    }
    let mut text = json!({
        "model_type": if moe { "qwen3_5_moe_text" } else { "qwen3_5_text" },
        "vocab_size": vocab,
        "num_hidden_layers": layers,
        "layer_types": layer_types,
        "rms_norm_eps": f.f32_of(&key("attention.layer_norm_rms_epsilon"))?,
        "rope_parameters": {
            "rope_theta": f.f32_of(&key("rope.freq_base"))?,
            "partial_rotary_factor": rot as f64 / head_dim.max(1) as f64,
        },
        "linear_value_head_dim": inner / hv,
        "tie_word_embeddings": f.tensor("output.weight").is_none(),
    });
    for (field, k, needed) in KEYS {
        let read = match needed {
            Needed::Always => true,
            Needed::Dense => !moe,
            Needed::Moe => moe,
            Needed::Derived => false,
        };
        if read {
            text[field] = Value::from(int(k)?);
        }
    }
    let mut cfg = ModelConfig::from_value(&text, f.path()).map_err(|e| match e {
        ModelError::ConfigField {
            path,
            field,
            expected,
            found,
        } => ModelError::ConfigField {
            path,
            field: gguf_key(arch, &field),
            expected,
            found,
        },
        other => other,
    })?;
    cfg.linear_value_head_order = VHeadOrder::Tiled;
    Ok(cfg)
}

/// The GGUF key a derived config.json field came from (the field itself if none).
fn gguf_key(arch: &str, field: &str) -> String {
    let field = field.rsplit('.').next().unwrap_or(field);
    match field {
        "rope_theta" => format!("{arch}.rope.freq_base"),
        "partial_rotary_factor" => format!("{arch}.rope.dimension_count"),
        "rms_norm_eps" => format!("{arch}.attention.layer_norm_rms_epsilon"),
        "num_hidden_layers" | "layer_types" => format!("{arch}.block_count"),
        _ => KEYS
            .iter()
            .find(|(f, _, _)| *f == field)
            .map_or(field.to_string(), |(_, k, _)| format!("{arch}.{k}")),
    }
}

/// The Hugging Face name of a llama.cpp tensor name (`None` for tensors the model does not
/// read: MTP blocks past the text layers, and names LSE does not know).
fn hf_name(gguf: &str, layers: usize) -> Option<String> {
    let global = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(n) = global {
        return Some(n.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (index, tensor) = rest.split_once('.')?;
    let layer: usize = index.parse().ok()?;
    if layer >= layers {
        return None;
    }
    let hf = match tensor {
        "attn_norm.weight" => "input_layernorm.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "attn_qkv.weight" => "linear_attn.in_proj_qkv.weight",
        "attn_gate.weight" => "linear_attn.in_proj_z.weight",
        "ssm_beta.weight" => "linear_attn.in_proj_b.weight",
        "ssm_alpha.weight" => "linear_attn.in_proj_a.weight",
        "ssm_out.weight" => "linear_attn.out_proj.weight",
        "ssm_conv1d.weight" => "linear_attn.conv1d.weight",
        "ssm_dt.bias" => "linear_attn.dt_bias",
        "ssm_a" => "linear_attn.ssm_a",
        "ssm_norm.weight" => "linear_attn.norm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        "ffn_gate_inp.weight" => "mlp.gate.weight",
        "ffn_gate_exps.weight" => "mlp.experts.gate_proj",
        "ffn_up_exps.weight" => "mlp.experts.up_proj",
        "ffn_gate_up_exps.weight" => "mlp.experts.gate_up_proj",
        "ffn_down_exps.weight" => "mlp.experts.down_proj",
        "ffn_gate_inp_shexp.weight" => "mlp.shared_expert_gate.weight",
        "ffn_gate_shexp.weight" => "mlp.shared_expert.gate_proj.weight",
        "ffn_up_shexp.weight" => "mlp.shared_expert.up_proj.weight",
        "ffn_down_shexp.weight" => "mlp.shared_expert.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
}

/// The Hugging Face shape of a tensor stored with ggml dims `ne` (innermost first): `ne`
/// reversed, with the conv weight given back its middle 1 and the shared-expert gate its
/// leading 1.
fn hf_shape(hf: &str, ne: &[u64]) -> Vec<usize> {
    let mut shape: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
    if hf.ends_with("conv1d.weight") && shape.len() == 2 {
        shape.insert(1, 1);
    } else if hf.ends_with("shared_expert_gate.weight") && shape.len() == 1 {
        shape.insert(0, 1);
    }
    shape
}

/// Adds the tensors of one GGUF file to `ws` under their Hugging Face names.
fn add_tensors(f: &GgufFile, cfg: &ModelConfig, ws: &mut WeightStore) {
    let map: Blob = f.map().clone();
    let mapped = ws.add_blob(f.path(), map);
    for t in f.tensors() {
        let Some(name) = hf_name(&t.name, cfg.num_layers()) else {
            continue;
        };
        let shape = hf_shape(&name, &t.ne);
        match &t.ty {
            Ok(ty) => ws.insert(name, stored(mapped, t, *ty, shape)),
            Err(unsupported) => ws.insert(
                name,
                Entry {
                    blob: mapped,
                    start: t.start,
                    end: t.end,
                    dtype: Err(format!("GGUF type {unsupported}")),
                    shape,
                    act: Activations::F32,
                    affine: None,
                },
            ),
        }
    }
}

/// The entry of a tensor of type `ty`, read where it is mapped (a float one, or a quantized
/// one the LOOM kernels read in place). Activations meet it as llama.cpp's CPU backend has
/// them: rounded to a 16-bit weight's type, quantized against a quantized weight (the type's
/// `vec_dot_type`: Q8_0 or Q8_1 blocks of 32, Q8_K blocks of 256).
fn stored(blob: usize, t: &GgufTensorInfo, ty: GgmlType, shape: Vec<usize>) -> Entry {
    Entry {
        blob,
        start: t.start,
        end: t.end,
        dtype: Ok(ty.storage()),
        shape,
        act: match ty {
            GgmlType::F32 => Activations::F32,
            GgmlType::F16 | GgmlType::BF16 => Activations::RoundedToWeight,
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Activations::Q8K,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                Activations::Q8_0
            }
        },
        affine: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_part_names_are_recognised_and_others_are_single_files() {
        assert_eq!(split_name("m-00001-of-00003.gguf"), Some(("m", 3)));
        assert_eq!(split_name("a-b-00002-of-00002.gguf"), Some(("a-b", 2)));
        assert_eq!(split_name("m.gguf"), None);
        assert_eq!(split_name("m-1-of-3.gguf"), None);
        assert_eq!(split_name("m-00001-of-00000.gguf"), None);
    }

    #[test]
    fn a_missing_part_of_a_split_set_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("m-00001-of-00002.gguf");
        std::fs::write(&first, b"GGUF").unwrap();
        let e = part_paths(&first).unwrap_err().to_string();
        assert!(
            e.contains("m-00002-of-00002.gguf") && e.contains("split GGUF checkpoint"),
            "{e}"
        );
    }

    #[test]
    fn llama_cpp_names_map_to_hugging_face_names_and_mtp_blocks_are_skipped() {
        assert_eq!(
            hf_name("blk.3.ssm_alpha.weight", 4).as_deref(),
            Some("model.layers.3.linear_attn.in_proj_a.weight")
        );
        assert_eq!(hf_name("blk.4.attn_q.weight", 4), None);
        assert_eq!(hf_name("blk.x.attn_q.weight", 4), None);
        assert_eq!(
            hf_name("output.weight", 4).as_deref(),
            Some("lm_head.weight")
        );
        assert_eq!(
            hf_shape("model.layers.0.linear_attn.conv1d.weight", &[4, 64]),
            vec![64, 1, 4]
        );
        assert_eq!(
            hf_shape("model.layers.0.mlp.shared_expert_gate.weight", &[16]),
            vec![1, 16]
        );
    }
}
