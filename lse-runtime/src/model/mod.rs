//! The Qwen3.5 hybrid model (Gated DeltaNet + gated attention, dense or MoE): loading from a
//! Hugging Face directory or a llama.cpp GGUF file onto a device, and prefill through the LOOM
//! kernels.
//!
//! Residency: the weights are made available to the device once, at load
//! ([`device_weights`]); a session's KV cache and DeltaNet states live in the device's memory,
//! and so does every activation of a pass. On a GPU nothing crosses to the host during a pass
//! but the MoE router's choices and FlashPrefill's block lists (small, integer bookkeeping);
//! the final hidden rows stay on the device for the head.
//!
//! Numerics: activations stay f32 end to end (llama.cpp style); weights are read in their
//! stored dtype and converted tile by tile. The products with a weight follow its
//! checkpoint's reference ([`GemmActivations`]). The KV cache rounds K/V to its dtype.

pub mod attention;
pub mod config;
pub mod deltanet;
pub mod device_weights;
pub mod error;
pub mod ffn;
pub mod gguf;
pub mod kv_cache;
pub mod linear;
pub mod mlx;
pub mod prefill;
pub mod safetensors_file;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

pub use config::{LayerKind, ModelConfig, MoeConfig};
pub use error::{ModelError, Result};
pub use kv_cache::{Session, DEFAULT_KV_DTYPE};
pub use prefill::{PrefillAttention, SparseWhen};
pub use weights::{DType, Storage};

use crate::device::{Device, DeviceBuf, Pool};
use crate::ops::{RopeTable, WeightView};

use attention::AttnWeights;
use deltanet::GdnWeights;
use device_weights::{small, DeviceWeight};
use ffn::Ffn;
use kv_cache::LayerState;
use tokenizer::TextTokenizer;
use weights::{Tensor, WeightStore};

enum Mixer {
    Attn(AttnWeights),
    Linear(GdnWeights),
}

struct Layer {
    input_norm: DeviceBuf<f32>,
    post_norm: DeviceBuf<f32>,
    mixer: Mixer,
    ffn: Ffn,
}

/// Borrowed view of the LM-head weight: row-major [vocab, hidden] in `dtype`.
#[derive(Clone, Copy)]
pub struct LmHeadView<'a> {
    /// How the bytes are stored.
    pub dtype: Storage,
    /// Rows (V).
    pub vocab: usize,
    /// Columns (H).
    pub hidden: usize,
    /// Raw little-endian bytes as stored.
    pub bytes: &'a [u8],
}

/// A loaded Qwen3.5 text model ready for prefill, its weights available to one device.
pub struct HybridLM {
    cfg: ModelConfig,
    /// The checkpoint: a model directory or a GGUF file.
    source: PathBuf,
    device: Device,
    embed: DeviceWeight,
    /// `None` when the head is tied to the embedding.
    head_weight: Option<DeviceWeight>,
    /// The head's tensor as stored (the embedding's when tied).
    head: Tensor,
    final_norm: DeviceBuf<f32>,
    layers: Vec<Layer>,
    inv_freq: Vec<f32>,
    tokenizer: Option<TextTokenizer>,
}

/// `path` as a Hugging Face model directory, with its parsed `config.json` and, for an MLX
/// quantized checkpoint (its config has mlx-lm's `quantization`), the config's JSON; a file
/// is refused with what it is.
fn checkpoint_dir(path: &Path) -> Result<(&Path, ModelConfig, Option<serde_json::Value>)> {
    if path.is_file() {
        return Err(ModelError::NotAModelDirectory {
            path: path.to_path_buf(),
            what: "a file without the .gguf extension",
        });
    }
    if !path.is_dir() {
        return Err(ModelError::MissingFile {
            path: path.to_path_buf(),
            what: "model: a Hugging Face model directory or a GGUF file".into(),
        });
    }
    let config = path.join("config.json");
    let root = config::read_json(&config)?;
    if mlx::is_mlx_quantized(&root) {
        return Ok((path, mlx::read_config(&root, &config)?, Some(root)));
    }
    Ok((path, ModelConfig::from_value(&root, &config)?, None))
}

/// How the activations of a checkpoint meet its 16-bit float weights in the GEMM
/// (`--gemm-activations`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GemmActivations {
    /// As the checkpoint's reference computes them: f32 for a Hugging Face or MLX directory
    /// (transformers' f32 products), llama.cpp's rounding or quantization for a GGUF file.
    #[default]
    Reference,
    /// Rounded to a bf16 or f16 weight's own dtype before its products, as llama.cpp's CPU
    /// backend does: the products are exact, so the matrix instructions (`vdpbf16ps`, AMX)
    /// apply. A GGUF file already runs so; f32 and quantized weights keep their rule.
    WeightDtype,
    /// Kept f32 against a bf16 weight, as under `Reference` for a Hugging Face or MLX
    /// directory, but on a CPU with AMX split into three bf16 pieces that sum to each value
    /// exactly, so each product is exact and the dots run on AMX tiles
    /// ([`crate::ops::Activations::Bf16x3`]); the sums are in the tiles' order. Elsewhere the
    /// same as `Reference`; weights that meet rounded or quantized activations (a GGUF file's)
    /// keep their rule.
    Bf16x3,
}

impl GemmActivations {
    /// The option's value as written on the command line and in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            GemmActivations::Reference => "reference",
            GemmActivations::WeightDtype => "weight-dtype",
            GemmActivations::Bf16x3 => "bf16x3",
        }
    }
}

/// Weight-name prefixes of the text model, tried in order (spec §3.1).
const PREFIXES: [&str; 3] = ["model.language_model.", "language_model.model.", "model."];

impl HybridLM {
    /// Reads the config of the checkpoint at `path` without touching the weights: a Hugging
    /// Face directory's `config.json`, or a GGUF file's metadata.
    pub fn read_config(path: &Path) -> Result<ModelConfig> {
        if gguf::is_gguf(path) && path.is_file() {
            return gguf::GgufCheckpoint::read_config(path);
        }
        Ok(checkpoint_dir(path)?.1)
    }

    /// [`HybridLM::load_on`] for the CPU-side devices: weights stay memory-mapped, read where
    /// they are.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_on(dir, &Device::open(Pool::Cpu)?)
    }

    /// Loads a checkpoint, with the weights made available to `dev` once: on a GPU uploaded
    /// to its memory; on the CPU-side devices memory-mapped and read where they are (copied
    /// once if not aligned for their dtype). `path` is a Hugging Face directory (config.json,
    /// the possibly sharded safetensors weights and, if present, tokenizer.json) or a GGUF
    /// file of llama.cpp's `qwen35`/`qwen35moe` architectures (or the first part of a split
    /// set), whose quantized tensors stay in their block format (the kernels read them as
    /// stored); its tokenizer is `tokenizer.json` beside it if there is one, else its own. A
    /// directory whose config.json has mlx-lm's `quantization` is an MLX quantized checkpoint
    /// ([`mlx`]): its 4- and 8-bit weights stay packed (the kernels dequantize them as
    /// `mx.dequantize` does), other widths are dequantized at load. Sessions of the model keep
    /// their state in `dev`'s memory.
    pub fn load_on(path: &Path, dev: &Device) -> Result<Self> {
        Self::load_with(path, dev, GemmActivations::Reference)
    }

    /// [`HybridLM::load_on`] with the activations meeting 16-bit weights as `act` says.
    pub fn load_with(path: &Path, dev: &Device, act: GemmActivations) -> Result<Self> {
        let (cfg, mut ws, tokenizer, config_path) = if gguf::is_gguf(path) && path.is_file() {
            let ck = gguf::GgufCheckpoint::open(path)?;
            let beside = path.parent().unwrap_or(Path::new("."));
            let tokenizer = match TextTokenizer::load(beside)? {
                Some(t) => Some(t),
                None if ck.files[0].get("tokenizer.ggml.model").is_none() => None,
                None => Some(TextTokenizer::from_gguf(&ck.files[0])?),
            };
            (ck.config, ck.weights, tokenizer, path.to_path_buf())
        } else {
            let (dir, cfg, mlx_config) = checkpoint_dir(path)?;
            let config_path = dir.join("config.json");
            let ws = match &mlx_config {
                Some(root) => mlx::open(dir, root, &config_path)?,
                None => {
                    let ws = WeightStore::open(dir)?;
                    mlx::check_unquantized(&ws, &config_path)?;
                    ws
                }
            };
            (cfg, ws, TextTokenizer::load(dir)?, config_path)
        };
        match act {
            GemmActivations::Reference => {}
            GemmActivations::WeightDtype => ws.round_activations_to_weight_dtype(),
            GemmActivations::Bf16x3 => ws.split_activations_for_bf16_weights(),
        }
        Self::from_store(path, cfg, ws, tokenizer, &config_path, dev)
    }

    /// The model of checkpoint `path` from its parsed config and weights (`config_path` names
    /// the config in errors).
    fn from_store(
        path: &Path,
        cfg: ModelConfig,
        ws: WeightStore,
        tokenizer: Option<TextTokenizer>,
        config_path: &Path,
        dev: &Device,
    ) -> Result<Self> {
        if cfg.head_dim > crate::ops::MAX_HEAD_DIM {
            return Err(ModelError::InvalidArgument(format!(
                "{}: head_dim {} is above {}, the largest the attention kernels take",
                config_path.display(),
                cfg.head_dim,
                crate::ops::MAX_HEAD_DIM
            )));
        }
        if cfg.linear_key_head_dim > crate::ops::MAX_KEY_HEAD_DIM {
            return Err(ModelError::InvalidArgument(format!(
                "{}: linear_key_head_dim {} is above {}, the largest the delta rule kernel takes",
                config_path.display(),
                cfg.linear_key_head_dim,
                crate::ops::MAX_KEY_HEAD_DIM
            )));
        }
        let prefix = PREFIXES
            .iter()
            .find(|p| ws.contains(&format!("{p}embed_tokens.weight")))
            .ok_or_else(|| ModelError::MissingTensor {
                path: path.to_path_buf(),
                tensor: if cfg.multimodal_wrapper {
                    "model.language_model.embed_tokens.weight".into()
                } else {
                    "model.embed_tokens.weight".into()
                },
            })?;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let embed = ws.get(&format!("{prefix}embed_tokens.weight"), &[v, h])?;
        let head = if cfg.tie_word_embeddings {
            embed.clone()
        } else {
            let name = ["lm_head.weight", "language_model.lm_head.weight"]
                .into_iter()
                .find(|n| ws.contains(n))
                .unwrap_or("lm_head.weight");
            ws.get(name, &[v, h])?
        };
        let head_weight = if cfg.tie_word_embeddings {
            None
        } else {
            Some(DeviceWeight::new(dev, &head)?)
        };
        let norm = |name: &str| -> Result<DeviceBuf<f32>> { small(dev, &ws.norm_weight(name, h)?) };
        let final_norm = norm(&format!("{prefix}norm.weight"))?;
        let mut layers = Vec::with_capacity(cfg.num_layers());
        for (i, kind) in cfg.layer_types.iter().enumerate() {
            let p = format!("{prefix}layers.{i}.");
            let mixer = match kind {
                LayerKind::Full => Mixer::Attn(AttnWeights::load(dev, &ws, &p, &cfg)?),
                LayerKind::Linear => Mixer::Linear(GdnWeights::load(dev, &ws, &p, &cfg)?),
            };
            layers.push(Layer {
                input_norm: norm(&format!("{p}input_layernorm.weight"))?,
                post_norm: norm(&format!("{p}post_attention_layernorm.weight"))?,
                mixer,
                ffn: Ffn::load(dev, &ws, &p, &cfg)?,
            });
        }
        let inv_freq = crate::ops::rope_inv_freq(cfg.rope_theta, cfg.rotary_dim());
        Ok(HybridLM {
            tokenizer,
            source: path.to_path_buf(),
            cfg,
            device: dev.clone(),
            embed: DeviceWeight::new(dev, &embed)?,
            head_weight,
            head,
            final_norm,
            layers,
            inv_freq,
        })
    }

    /// The parsed model configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The LM-head weight (the embedding matrix when tied), in its stored dtype.
    pub fn lm_head(&self) -> LmHeadView<'_> {
        LmHeadView {
            dtype: self.head.dtype,
            vocab: self.cfg.vocab_size,
            hidden: self.cfg.hidden_size,
            bytes: self.head.bytes(),
        }
    }

    /// The LM-head weight `[vocab, hidden]` as the head's kernels read it, on the device the
    /// model was loaded for (the embedding's when tied).
    pub fn head_view(&self) -> WeightView<'_> {
        self.head_weight.as_ref().unwrap_or(&self.embed).view()
    }

    /// How hidden rows meet the LM-head weight ([`crate::ops::Activations`]): f32 for a
    /// Hugging Face checkpoint (unless loaded with [`GemmActivations::WeightDtype`]),
    /// llama.cpp's rule for the head's type in a GGUF file.
    pub fn head_act(&self) -> crate::ops::Activations {
        self.head_weight.as_ref().unwrap_or(&self.embed).act
    }

    /// The device the weights were made available to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The tokenizer: a Hugging Face directory's `tokenizer.json` if it has one; for a GGUF
    /// file, `tokenizer.json` beside it or else the file's own.
    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.tokenizer.as_ref()
    }

    /// Tokenises text; errors clearly when the model directory has no tokenizer.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.tokenizer {
            Some(t) => t.encode(text),
            None if gguf::is_gguf(&self.source) => Err(ModelError::Tokenizer {
                path: self.source.clone(),
                message: "text input needs a tokenizer, but the GGUF file has no tokenizer.ggml.* \
                          metadata and no tokenizer.json lies beside it (pass token ids instead)"
                    .into(),
            }),
            None => Err(ModelError::Tokenizer {
                path: self.source.join("tokenizer.json"),
                message: "text input needs a tokenizer, but tokenizer.json is missing (pass token ids instead)".into(),
            }),
        }
    }

    /// A fresh session whose KV cache stores `kv_len` tokens in `kv_dtype`, its state in the
    /// memory of the device the model was loaded for.
    pub fn new_session(&self, kv_dtype: DType, kv_len: usize) -> Result<Session> {
        Session::new(&self.device, &self.cfg, kv_dtype, kv_len)
    }

    /// One prefill pass over `tokens`, continuing `session` (KV cache, conv and recurrent
    /// states, position), with the full-attention layers' attention run by `attn`. Returns the
    /// final-norm hidden rows [T, H] in f32, copied to the host ([`HybridLM::hidden_on_device`]
    /// keeps them on the device).
    ///
    /// All checks (token ids, KV capacity, session shape) happen before any state changes.
    pub fn hidden(
        &self,
        session: &mut Session,
        tokens: &[u32],
        attn: &PrefillAttention,
    ) -> Result<Vec<f32>> {
        Ok(self.hidden_on_device(session, tokens, attn)?.to_vec()?)
    }

    /// [`HybridLM::hidden`] with the hidden rows left in the memory of `attn`'s device.
    pub fn hidden_on_device(
        &self,
        session: &mut Session,
        tokens: &[u32],
        attn: &PrefillAttention,
    ) -> Result<DeviceBuf<f32>> {
        self.hidden_rows_on_device(session, tokens, attn, 0)
    }

    /// [`HybridLM::hidden_on_device`] returning only the final hidden rows of `tokens[from..]`
    /// (`[t - from, H]`, the same bits as those rows of the whole pass). The caches and states
    /// advance over every token, but the last layer's residual adds, FFN and the final norm
    /// run over the kept rows only, as llama.cpp computes only its output rows there: a
    /// scorer needs the rows it scores, half of each chunk. `from > t` is an error.
    pub fn hidden_rows_on_device(
        &self,
        session: &mut Session,
        tokens: &[u32],
        attn: &PrefillAttention,
        from: usize,
    ) -> Result<DeviceBuf<f32>> {
        let (h, t) = (self.cfg.hidden_size, tokens.len());
        if from > t {
            return Err(ModelError::InvalidArgument(format!(
                "hidden rows from {from} asked of a pass of {t} tokens"
            )));
        }
        let kinds_match = session.layers.len() == self.layers.len()
            && session.layers.iter().zip(&self.layers).all(|(s, l)| {
                matches!(
                    (s, &l.mixer),
                    (LayerState::Full(_), Mixer::Attn(_))
                        | (LayerState::Linear(_), Mixer::Linear(_))
                )
            });
        if !kinds_match {
            return Err(ModelError::InvalidArgument(format!(
                "session layout ({} layers) does not match the model ({} layers): use HybridLM::new_session of this model",
                session.layers.len(),
                self.layers.len()
            )));
        }
        if let Some((i, &id)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= self.cfg.vocab_size)
        {
            return Err(ModelError::InvalidArgument(format!(
                "token id {id} at index {i} is out of range (vocab_size {})",
                self.cfg.vocab_size
            )));
        }
        session.check_fits(t)?;
        let dev = attn.device();
        let mut out = dev.alloc((t - from) * h)?;
        if t == 0 {
            return Ok(out);
        }
        // The activations of the pass come from the device's kept buffers, each layer reusing
        // the last one's, and stay kept for the next pass.
        self.layers_forward(session, tokens, attn, from, &mut out)?;
        session.pos += t;
        Ok(out)
    }

    /// The layers of [`HybridLM::hidden_rows_on_device`] over the checked, non-empty
    /// `tokens`: the embedding, every layer, and the final norm of rows `from..` into `out`
    /// `[t - from, H]`.
    fn layers_forward(
        &self,
        session: &mut Session,
        tokens: &[u32],
        attn: &PrefillAttention,
        from: usize,
        out: &mut DeviceBuf<f32>,
    ) -> Result<()> {
        let (h, t) = (self.cfg.hidden_size, tokens.len());
        let dev = attn.device();
        let mut x = dev.alloc(t * h)?;
        let mut u = dev.alloc(t * h)?;
        crate::ops::embed_tokens(dev, self.embed.view(), h, tokens, &mut x)?;
        let pos0 = session.pos;
        let eps = self.cfg.rms_norm_eps as f32;
        let rope = RopeTable::new(dev, &self.inv_freq, pos0, t)?;
        let mut m = dev.alloc(t * h)?;
        // Each norm after the first adds the residual it follows (`x += m`) in the same pass;
        // the last layer's second one is the final norm.
        let Some(first) = self.layers.first() else {
            let kept = x.slice(from * h..)?;
            crate::ops::rmsnorm(dev, kept, &self.final_norm, eps, &mut *out)?;
            return Ok(());
        };
        crate::ops::rmsnorm(dev, &x, &first.input_norm, eps, &mut u)?;
        for (i, (layer, state)) in self
            .layers
            .iter()
            .zip(session.layers.iter_mut())
            .enumerate()
        {
            match (&layer.mixer, state) {
                (Mixer::Attn(w), LayerState::Full(cache)) => attention::forward(
                    &self.cfg,
                    w,
                    &rope,
                    u.view(),
                    pos0,
                    cache,
                    attn,
                    m.view_mut(),
                )?,
                (Mixer::Linear(w), LayerState::Linear(st)) => {
                    deltanet::forward(dev, &self.cfg, w, u.view(), st, m.view_mut())?
                }
                _ => unreachable!("session layer kinds follow the model config"),
            }
            // Past the last layer's mixer only the kept rows go on: no later layer reads the
            // others.
            let rows = if i + 1 == self.layers.len() {
                from * h..t * h
            } else {
                0..t * h
            };
            let n = rows.len();
            if n == 0 {
                break;
            }
            let post = m.slice(rows.clone())?;
            let x_rows = x.slice_mut(rows.clone())?;
            crate::ops::add_rmsnorm(dev, x_rows, post, &layer.post_norm, eps, u.slice_mut(..n)?)?;
            layer.ffn.forward(dev, u.slice(..n)?, m.slice_mut(..n)?)?;
            let x_rows = x.slice_mut(rows)?;
            let (norm, dest) = match self.layers.get(i + 1) {
                Some(next) => (&next.input_norm, u.slice_mut(..n)?),
                None => (&self.final_norm, out.view_mut()),
            };
            crate::ops::add_rmsnorm(dev, x_rows, m.slice(..n)?, norm, eps, dest)?;
        }
        Ok(())
    }

    /// Plain-Rust LM head for tests: logits [rows, V] = hidden [rows, H] · W_headᵀ, each dot
    /// product summed in f64 from the widened weight (no LOOM kernel), rows of the vocabulary
    /// split across threads.
    pub fn logits_reference(&self, hidden: &[f32], rows: usize) -> Vec<f32> {
        use rayon::prelude::*;
        let (h, v) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let w = self.head.to_f32_vec();
        let mut out = vec![0.0; rows * v];
        for (o, x) in out.chunks_exact_mut(v).zip(hidden.chunks_exact(h)) {
            o.par_iter_mut()
                .zip(w.par_chunks_exact(h))
                .for_each(|(o, wr)| {
                    *o = x
                        .iter()
                        .zip(wr)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>() as f32;
                });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{lm_head_dev_act, QuantFormat, WeightView};

    /// A GGUF model whose quantized weights the kernels read in place (the MoE model's
    /// stacked experts, Q8_0's in one launch per product for all of them, Q4_0's and Q5_1's
    /// sliced one expert at a time, and its embedding in Q8_0,
    /// Q4_0 or Q5_1, its head in Q8_0) gives the bits of the same model with those weights
    /// dequantized to f32 at load where the kernels multiply in f32 (Q4_0, Q5_1), and the same
    /// values up to f32 rounding where they multiply in integers (Q8_0: the same quantized
    /// activations, the scales applied per block; within 1e-4 of the largest magnitude).
    #[test]
    fn quantized_weights_read_in_place_give_the_bits_of_dequantized_ones() {
        for (file, format) in [
            ("moe_fused-q8_0.gguf", QuantFormat::Q8_0),
            ("moe_fused-q4_0.gguf", QuantFormat::Q4_0),
            ("moe_fused-q5_1.gguf", QuantFormat::Q5_1),
        ] {
            quantized_model_equals_dequantized(file, format);
        }
    }

    /// The test above on one file, whose experts are in `format`.
    fn quantized_model_equals_dequantized(file: &str, format: QuantFormat) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/gguf")
            .join(file);
        let dev = Device::open(Pool::Host).unwrap();
        let load = |dequantize: bool| {
            let ck = gguf::GgufCheckpoint::open(&path).unwrap();
            let mut ws = ck.weights;
            let quantized: Vec<String> = ws
                .names()
                .filter(|n| matches!(ws.tensor(n).map(|t| t.dtype), Ok(Storage::Quant(_))))
                .map(str::to_string)
                .collect();
            assert!(
                quantized.iter().any(|n| n.contains("experts")
                    && ws.tensor(n).unwrap().dtype == Storage::Quant(format)),
                "{file}: {format:?} experts among {quantized:?}"
            );
            if dequantize {
                for n in &quantized {
                    let t = ws.tensor(n).unwrap();
                    ws.insert_f32(n.clone(), &path, t.to_f32_vec(), t.shape.clone(), t.act);
                }
            }
            HybridLM::from_store(&path, ck.config, ws, None, &path, &dev).unwrap()
        };
        let (in_place, dequantized) = (load(false), load(true));
        assert!(matches!(in_place.head_view(), WeightView::Quant(_)));
        assert!(matches!(dequantized.head_view(), WeightView::F32(_)));
        let vocab = in_place.config().vocab_size;
        let tokens: Vec<u32> = (0..40).map(|i| (i * 37 % vocab) as u32).collect();
        let attn = PrefillAttention::dense(&dev);
        let (a, b) = (
            hidden_and_logits(&dev, &in_place, &tokens, &attn),
            hidden_and_logits(&dev, &dequantized, &tokens, &attn),
        );
        // The head is Q8_0 in every file, so the logits always come from an integer GEMM.
        let exact_hidden = crate::ops::integer_gemm_activations(format).is_none();
        for (what, got, want, exact) in [
            ("hidden rows", &a.0, &b.0, exact_hidden),
            ("logits", &a.1, &b.1, false),
        ] {
            if exact {
                assert_eq!(got, want, "{file}: {what}");
                continue;
            }
            let vals = |v: &[u32]| v.iter().map(|&x| f32::from_bits(x)).collect::<Vec<_>>();
            let (got, want) = (vals(got), vals(want));
            let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert!(scale > 0.0, "{file}: {what} all zero");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * scale,
                    "{file}: {what}[{i}]: {g} vs {w}"
                );
            }
        }
    }

    /// The bits of `m`'s hidden rows and logits for `tokens`, in a fresh session.
    fn hidden_and_logits(
        dev: &Device,
        m: &HybridLM,
        tokens: &[u32],
        attn: &PrefillAttention,
    ) -> (Vec<u32>, Vec<u32>) {
        let mut s = m.new_session(DType::F32, tokens.len()).unwrap();
        let hidden = m.hidden(&mut s, tokens, attn).unwrap();
        let (h, vocab) = (m.config().hidden_size, m.config().vocab_size);
        let mut logits = vec![0.0f32; tokens.len() * vocab];
        lm_head_dev_act(
            dev,
            (&hidden[..]).into(),
            h,
            m.head_view(),
            vocab,
            (&mut logits[..]).into(),
            m.head_act(),
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (bits(&hidden), bits(&logits))
    }

    /// Every activation of a pass is written before it is read, since it reuses buffers that
    /// earlier layers and passes wrote: with the device keeping buffers of every size full of
    /// NaN beforehand, the hidden rows and logits of a dense and a MoE model and of GGUF
    /// models whose activations are quantized (Q8_0 and Q8_K for the integer GEMMs, Q8_0 kept
    /// f32 against Q4_0) keep their bits (70 tokens: the last delta-rule chunk is partial;
    /// the quantized activations' padding rows hold the largest 8-bit values). A second pass
    /// of the same length allocates no buffer: the first left its buffers kept.
    #[test]
    fn a_pass_gives_the_same_bits_whatever_its_reused_buffers_held() {
        use synthetic::{write_random_model, SyntheticSpec};
        let dir = tempfile::tempdir().unwrap();
        let mut models = Vec::new();
        for (name, spec) in [
            ("dense", SyntheticSpec::tiny()),
            ("moe", SyntheticSpec::tiny_moe()),
        ] {
            let path = dir.path().join(name);
            write_random_model(&path, &spec, 7).unwrap();
            models.push(path);
        }
        let gguf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/gguf");
        for file in [
            "moe_fused-q8_0.gguf",
            "moe_fused-q4_0.gguf",
            "wide-q4_k_m.gguf",
        ] {
            models.push(gguf.join(file));
        }
        for path in models {
            let dev = Device::open(Pool::Host).unwrap();
            let model = HybridLM::load_on(&path, &dev).unwrap();
            let vocab = model.config().vocab_size;
            let tokens: Vec<u32> = (0..70).map(|i| (i * 37 % vocab) as u32).collect();
            let attn = PrefillAttention::dense(&dev);
            let clean = hidden_and_logits(&dev, &model, &tokens, &attn);
            let sizes = || (0..22).map(|p| 1usize << p);
            dev.keep_scratch_holding(sizes(), f32::NAN);
            dev.keep_scratch_holding(sizes().take(10), half::bf16::NAN);
            dev.keep_scratch_holding(sizes().take(20), 0x7f7f_7f7f_i32);
            let reused = hidden_and_logits(&dev, &model, &tokens, &attn);
            assert!(clean == reused, "{}: the bits moved", path.display());
            let dev = Device::open(Pool::Host).unwrap();
            let model = HybridLM::load_on(&path, &dev).unwrap();
            let attn = PrefillAttention::dense(&dev);
            let pass = || {
                let mut session = model.new_session(DType::F32, tokens.len()).unwrap();
                model.hidden(&mut session, &tokens, &attn).unwrap();
                dev.scratch_allocations()
            };
            let first = pass();
            assert_eq!(pass(), first, "{}", path.display());
        }
    }

    /// MLX checkpoints whose 4- and 8-bit modules the kernels read packed (4 bits in groups
    /// of 64 and 8 bits in groups of 32, the embedding and the untied head among them; and a
    /// mix where 2-, 3-, 5- and 6-bit modules, the embedding and the head among them, are
    /// dequantized at load beside packed 4- and 8-bit ones) give the bits of the same models
    /// with every module dequantized to f32 at load.
    #[test]
    fn mlx_weights_read_packed_give_the_bits_of_dequantized_ones() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mlx");
        let dev = Device::open(Pool::Host).unwrap();
        for (name, ends_packed) in [("wide-q4", true), ("wide-q8", true), ("wide-mixed", false)] {
            let dir = root.join(name);
            let load = |dequantize: bool| {
                let (_, cfg, json) = checkpoint_dir(&dir).unwrap();
                let config_path = dir.join("config.json");
                let mut ws = mlx::open(&dir, &json.unwrap(), &config_path).unwrap();
                let packed: Vec<String> = ws
                    .names()
                    .filter(|n| matches!(ws.tensor(n).map(|t| t.dtype), Ok(Storage::Affine(..))))
                    .map(str::to_string)
                    .collect();
                let embedding = packed.iter().any(|n| n.ends_with("embed_tokens.weight"));
                assert!(
                    !packed.is_empty() && embedding == ends_packed,
                    "{name}: packed {packed:?}"
                );
                if dequantize {
                    for n in &packed {
                        let t = ws.tensor(n).unwrap();
                        ws.insert_f32(n.clone(), &dir, t.to_f32_vec(), t.shape.clone(), t.act);
                    }
                }
                HybridLM::from_store(&dir, cfg, ws, None, &config_path, &dev).unwrap()
            };
            let (packed, dequantized) = (load(false), load(true));
            let head_packed = matches!(packed.head_view(), WeightView::Affine(_));
            assert_eq!(head_packed, ends_packed, "{name}");
            assert!(
                matches!(dequantized.head_view(), WeightView::F32(_)),
                "{name}"
            );
            let vocab = packed.config().vocab_size;
            let tokens: Vec<u32> = (0..40).map(|i| (i * 37 % vocab) as u32).collect();
            let attn = PrefillAttention::dense(&dev);
            let (a, b) = (
                hidden_and_logits(&dev, &packed, &tokens, &attn),
                hidden_and_logits(&dev, &dequantized, &tokens, &attn),
            );
            assert_eq!(a.0, b.0, "{name}: hidden rows");
            assert_eq!(a.1, b.1, "{name}: logits");
        }
    }
}
