//! Deterministic random Qwen3.5 models (config.json + model.safetensors) for benchmarks,
//! tests and the CLI demo, plus a streaming safetensors writer.

use std::io::Write;
use std::path::Path;

use super::config::MoeConfig;
use super::error::{ModelError, Result};
use super::weights::DType;

/// Shape of a synthetic model (a `qwen3_5_text` or `qwen3_5_moe_text` config).
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// V.
    pub vocab_size: usize,
    /// H.
    pub hidden_size: usize,
    /// L.
    pub num_layers: usize,
    /// Every `full_attention_interval`-th layer is full attention.
    pub full_attention_interval: usize,
    /// nH.
    pub num_attention_heads: usize,
    /// nKV.
    pub num_key_value_heads: usize,
    /// hd.
    pub head_dim: usize,
    /// Dense MLP width (ignored when `moe` is set).
    pub intermediate_size: usize,
    /// Hk.
    pub linear_num_key_heads: usize,
    /// Hv.
    pub linear_num_value_heads: usize,
    /// dk.
    pub linear_key_head_dim: usize,
    /// dv.
    pub linear_value_head_dim: usize,
    /// Kc.
    pub linear_conv_kernel_dim: usize,
    /// Tied LM head (no `lm_head.weight` written).
    pub tie_word_embeddings: bool,
    /// RoPE base.
    pub rope_theta: f64,
    /// MoE sizes; experts are written fused (`gate_up_proj`, `down_proj`).
    pub moe: Option<MoeConfig>,
    /// Dtype of the matrices (1-D tensors `A_log` and `linear_attn.norm` are always F32).
    pub dtype: DType,
}

impl SyntheticSpec {
    /// The Qwen3.5-0.8B text shape (spec §12): H 1024, 24 layers (3 linear : 1 full),
    /// 8/2 heads of 256, Hk 16, Hv 16, dk = dv = 128, I 3584, V 248320, tied head.
    pub fn qwen35_0_8b() -> Self {
        SyntheticSpec {
            vocab_size: 248_320,
            hidden_size: 1024,
            num_layers: 24,
            full_attention_interval: 4,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: 256,
            intermediate_size: 3584,
            linear_num_key_heads: 16,
            linear_num_value_heads: 16,
            linear_key_head_dim: 128,
            linear_value_head_dim: 128,
            linear_conv_kernel_dim: 4,
            tie_word_embeddings: true,
            rope_theta: 10_000_000.0,
            moe: None,
            dtype: DType::BF16,
        }
    }

    /// Qwen3.5-35B-A3B's widths and experts (hidden 2048, 16 query and 2 KV heads of 256,
    /// DeltaNet 16 key and 32 value heads of 128, 256 experts of 512 with 8 routed and a
    /// shared one, untied head) on 4 of its 40 layers (3 linear : 1 full): a MoE
    /// benchmark's model, 8.8 GB in bf16.
    pub fn qwen35_35b_a3b_4l() -> Self {
        SyntheticSpec {
            vocab_size: 248_320,
            hidden_size: 2048,
            num_layers: 4,
            full_attention_interval: 4,
            num_attention_heads: 16,
            num_key_value_heads: 2,
            head_dim: 256,
            intermediate_size: 512,
            linear_num_key_heads: 16,
            linear_num_value_heads: 32,
            linear_key_head_dim: 128,
            linear_value_head_dim: 128,
            linear_conv_kernel_dim: 4,
            tie_word_embeddings: false,
            rope_theta: 10_000_000.0,
            moe: Some(MoeConfig {
                num_experts: 256,
                num_experts_per_tok: 8,
                moe_intermediate_size: 512,
                shared_expert_intermediate_size: 512,
            }),
            dtype: DType::BF16,
        }
    }

    /// A tiny shape with the same structure (4 layers, 1 full), for fast tests.
    pub fn tiny() -> Self {
        SyntheticSpec {
            vocab_size: 96,
            hidden_size: 32,
            num_layers: 4,
            full_attention_interval: 4,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            intermediate_size: 48,
            linear_num_key_heads: 2,
            linear_num_value_heads: 4,
            linear_key_head_dim: 8,
            linear_value_head_dim: 8,
            linear_conv_kernel_dim: 4,
            tie_word_embeddings: false,
            rope_theta: 10_000_000.0,
            moe: None,
            dtype: DType::F32,
        }
    }

    /// [`SyntheticSpec::tiny`] with a mixture of experts (6 experts, 2 per token, widths 12
    /// and 10 for the shared expert), bf16 matrices and a tied head.
    pub fn tiny_moe() -> Self {
        SyntheticSpec {
            moe: Some(MoeConfig {
                num_experts: 6,
                num_experts_per_tok: 2,
                moe_intermediate_size: 12,
                shared_expert_intermediate_size: 10,
            }),
            dtype: DType::BF16,
            tie_word_embeddings: true,
            ..SyntheticSpec::tiny()
        }
    }

    /// The config.json content for this spec.
    pub fn config_json(&self) -> serde_json::Value {
        let mut c = serde_json::json!({
            "model_type": if self.moe.is_some() { "qwen3_5_moe_text" } else { "qwen3_5_text" },
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "full_attention_interval": self.full_attention_interval,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta, "partial_rotary_factor": 0.25},
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "tie_word_embeddings": self.tie_word_embeddings,
        });
        if let Some(m) = &self.moe {
            c["num_experts"] = m.num_experts.into();
            c["num_experts_per_tok"] = m.num_experts_per_tok.into();
            c["moe_intermediate_size"] = m.moe_intermediate_size.into();
            c["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size.into();
        }
        c
    }

    /// Every tensor as (name, dtype, shape, init), in file order.
    fn tensors(&self) -> Vec<(String, DType, Vec<usize>, Init)> {
        let (h, v, dt) = (self.hidden_size, self.vocab_size, self.dtype);
        let (nh, nkv, hd) = (
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
        );
        let kd = self.linear_num_key_heads * self.linear_key_head_dim;
        let vd = self.linear_num_value_heads * self.linear_value_head_dim;
        let hv = self.linear_num_value_heads;
        let lin = |i: usize| Init::Uniform(1.0 / (i as f32).sqrt());
        let zc = Init::Uniform(0.1);
        let mut t = vec![(
            "model.embed_tokens.weight".to_string(),
            dt,
            vec![v, h],
            Init::Uniform(0.05),
        )];
        for l in 0..self.num_layers {
            let p = format!("model.layers.{l}.");
            let mut add =
                |n: &str, d: DType, s: Vec<usize>, i: Init| t.push((format!("{p}{n}"), d, s, i));
            add("input_layernorm.weight", dt, vec![h], zc);
            add("post_attention_layernorm.weight", dt, vec![h], zc);
            if (l + 1) % self.full_attention_interval == 0 {
                add("self_attn.q_proj.weight", dt, vec![2 * nh * hd, h], lin(h));
                add("self_attn.k_proj.weight", dt, vec![nkv * hd, h], lin(h));
                add("self_attn.v_proj.weight", dt, vec![nkv * hd, h], lin(h));
                add(
                    "self_attn.o_proj.weight",
                    dt,
                    vec![h, nh * hd],
                    lin(nh * hd),
                );
                add("self_attn.q_norm.weight", dt, vec![hd], zc);
                add("self_attn.k_norm.weight", dt, vec![hd], zc);
            } else {
                let cd = 2 * kd + vd;
                add("linear_attn.in_proj_qkv.weight", dt, vec![cd, h], lin(h));
                add("linear_attn.in_proj_z.weight", dt, vec![vd, h], lin(h));
                add("linear_attn.in_proj_b.weight", dt, vec![hv, h], lin(h));
                add("linear_attn.in_proj_a.weight", dt, vec![hv, h], lin(h));
                add(
                    "linear_attn.conv1d.weight",
                    dt,
                    vec![cd, 1, self.linear_conv_kernel_dim],
                    Init::Uniform(0.5),
                );
                add("linear_attn.dt_bias", dt, vec![hv], Init::Uniform(1.0));
                add("linear_attn.A_log", DType::F32, vec![hv], Init::ALog);
                add(
                    "linear_attn.norm.weight",
                    DType::F32,
                    vec![self.linear_value_head_dim],
                    Init::One(0.1),
                );
                add("linear_attn.out_proj.weight", dt, vec![h, vd], lin(vd));
            }
            match &self.moe {
                None => {
                    let i = self.intermediate_size;
                    add("mlp.gate_proj.weight", dt, vec![i, h], lin(h));
                    add("mlp.up_proj.weight", dt, vec![i, h], lin(h));
                    add("mlp.down_proj.weight", dt, vec![h, i], lin(i));
                }
                Some(m) => {
                    let (e, im, is) = (
                        m.num_experts,
                        m.moe_intermediate_size,
                        m.shared_expert_intermediate_size,
                    );
                    add("mlp.gate.weight", dt, vec![e, h], lin(h));
                    add("mlp.experts.gate_up_proj", dt, vec![e, 2 * im, h], lin(h));
                    add("mlp.experts.down_proj", dt, vec![e, h, im], lin(im));
                    add(
                        "mlp.shared_expert.gate_proj.weight",
                        dt,
                        vec![is, h],
                        lin(h),
                    );
                    add("mlp.shared_expert.up_proj.weight", dt, vec![is, h], lin(h));
                    add(
                        "mlp.shared_expert.down_proj.weight",
                        dt,
                        vec![h, is],
                        lin(is),
                    );
                    add("mlp.shared_expert_gate.weight", dt, vec![1, h], lin(h));
                }
            }
        }
        t.push(("model.norm.weight".into(), dt, vec![h], zc));
        if !self.tie_word_embeddings {
            t.push(("lm_head.weight".into(), dt, vec![v, h], lin(h)));
        }
        t
    }
}

/// How a synthetic tensor is filled.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// Uniform in [−a, a].
    Uniform(f32),
    /// 1 + uniform in [−a, a] (plain norm weights).
    One(f32),
    /// ln(uniform in [1, 16]) like the HF initialiser of A_log.
    ALog,
}

/// xorshift64* generator: deterministic, fast, good enough for weights.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut s = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        if s == 0 {
            s = 1;
        }
        Rng(s)
    }
    /// Uniform in [0, 1).
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (r >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// One tensor to write: name, dtype, shape.
pub struct TensorDecl {
    /// Tensor name.
    pub name: String,
    /// Stored dtype.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
}

/// Streams a safetensors file: header first, then each tensor's data produced by
/// `fill(index, chunk_start, out)` in f32 chunks and converted to the declared dtype.
pub fn write_safetensors(
    path: &Path,
    tensors: &[TensorDecl],
    mut fill: impl FnMut(usize, usize, &mut [f32]),
) -> Result<()> {
    let io = |e| ModelError::io(path, e);
    let mut header = serde_json::Map::new();
    let mut off = 0usize;
    for t in tensors {
        let n: usize = t.shape.iter().product::<usize>() * t.dtype.size();
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype.name(), "shape": t.shape, "data_offsets": [off, off + n]}),
        );
        off += n;
    }
    let mut hb = serde_json::to_vec(&serde_json::Value::Object(header)).expect("json");
    let pad = (8 - hb.len() % 8) % 8;
    hb.resize(hb.len() + pad, b' ');
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    w.write_all(&(hb.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(&hb).map_err(io)?;
    const CH: usize = 1 << 16;
    let mut buf = vec![0f32; CH];
    let mut bytes = Vec::with_capacity(CH * 4);
    for (i, t) in tensors.iter().enumerate() {
        let n: usize = t.shape.iter().product();
        let mut s = 0;
        while s < n {
            let m = CH.min(n - s);
            fill(i, s, &mut buf[..m]);
            bytes.clear();
            for &x in &buf[..m] {
                match t.dtype {
                    DType::BF16 => {
                        bytes.extend_from_slice(&half::bf16::from_f32(x).to_bits().to_le_bytes())
                    }
                    DType::F16 => {
                        bytes.extend_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes())
                    }
                    DType::F32 => bytes.extend_from_slice(&x.to_le_bytes()),
                }
            }
            w.write_all(&bytes).map_err(io)?;
            s += m;
        }
    }
    w.flush().map_err(io)?;
    Ok(())
}

/// Writes `dir/config.json` and `dir/model.safetensors` with deterministic random weights.
pub fn write_random_model(dir: &Path, spec: &SyntheticSpec, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
    let cfg_path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&spec.config_json()).expect("json");
    std::fs::write(&cfg_path, text).map_err(|e| ModelError::io(&cfg_path, e))?;
    let list = spec.tensors();
    let decls: Vec<TensorDecl> = list
        .iter()
        .map(|(n, d, s, _)| TensorDecl {
            name: n.clone(),
            dtype: *d,
            shape: s.clone(),
        })
        .collect();
    let mut rng = Rng::new(seed, 0);
    let mut cur = usize::MAX;
    write_safetensors(&dir.join("model.safetensors"), &decls, |i, _, out| {
        if i != cur {
            cur = i;
            rng = Rng::new(seed, i as u64 + 1);
        }
        let init = list[i].3;
        for o in out.iter_mut() {
            let r = rng.next();
            *o = match init {
                Init::Uniform(a) => (2.0 * r - 1.0) * a,
                Init::One(a) => 1.0 + (2.0 * r - 1.0) * a,
                Init::ALog => (1.0 + 15.0 * r).ln(),
            };
        }
    })
}
