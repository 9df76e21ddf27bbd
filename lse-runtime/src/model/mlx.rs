//! An MLX checkpoint quantized by mlx-lm (`mlx_lm convert -q`): a safetensors directory whose
//! config.json has a `quantization` object (`{"group_size", "bits", "mode"}`, copied to
//! `quantization_config`), with per-module overrides inside it named by module path (an object
//! of the same fields, or `false` for a module left unquantized).
//!
//! Each quantized Linear or Embedding `X` is stored as `X.weight` (U32 `[rows, cols * bits /
//! 32]`: the row's values as one little-endian bit stream, value `j` in bits `j * bits ..`),
//! `X.scales` and `X.biases` (`[rows, cols / group_size]`, the checkpoint's float dtype); a value
//! is `scales[g] * q + biases[g]`, computed as `mx.dequantize` computes it: in the dtype of the
//! scales, so for bf16 scales `bf16(bf16(s * q) + b)` (measured with mlx 0.32.4: bit for bit
//! equal to `mx.dequantize(...)`, also when asked for an f32 result). A 4- or 8-bit module
//! stays packed: `X.weight` becomes a [`Storage::Affine`] tensor of the Hugging Face shape
//! `[rows, cols]`, read where it is mapped, that carries `X.scales` and `X.biases` along
//! ([`AffineParts`]), and LOOM kernels dequantize its values as they read them
//! (`kernels-src/src/gemm_mlx.rs`, `embedding.gather_mlx`). Other widths (2, 3, 5, 6 bits) are
//! replaced by their f32 dequantization ([`dequantize_row`]) at load. The rest of the tensors
//! are read where they are mapped.
//!
//! mlx-lm's own conventions ([`Conventions::Mlx`]): the zero-centred norm weights saved with
//! the 1 added, `A_log` raw, the conv weight as `[conv_dim, kc, 1]` (the bytes of Hugging
//! Face's `[conv_dim, 1, kc]`, viewed so), value heads grouped as in Hugging Face. Its
//! config.json may be the flat text config under model_type `qwen3_5` (mlx-lm's ModelArgs
//! takes it so), whose attention layers mlx-lm picks by `full_attention_interval`.

use std::path::Path;

use rayon::prelude::*;
use serde_json::Value;

use super::config::ModelConfig;
use super::error::{ModelError, Result};
use super::weights::{AffineParts, Conventions, DType, Entry, Storage, WeightStore};
use crate::ops::{Activations, AffineFormat};

/// The bit widths of mlx's affine quantization.
pub const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
/// The group sizes of mlx's affine quantization.
pub const GROUP_SIZES: [usize; 3] = [32, 64, 128];

/// The quantization settings of one module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantParams {
    /// Values sharing one scale and bias.
    pub group_size: usize,
    /// Bits per value.
    pub bits: u32,
}

/// The config field holding an MLX checkpoint's quantization, if `root` (a config.json) has
/// one: `quantization`, or a `quantization_config` with mlx's fields and no `quant_method`
/// (which other quantizers write).
pub fn quantization_field(root: &Value) -> Option<&'static str> {
    if root.get("quantization").is_some() {
        return Some("quantization");
    }
    let qc = root.get("quantization_config")?.as_object()?;
    (qc.get("quant_method").is_none() && (qc.contains_key("bits") || qc.contains_key("group_size")))
        .then_some("quantization_config")
}

/// True when the config.json `root` describes an MLX quantized checkpoint.
pub fn is_mlx_quantized(root: &Value) -> bool {
    quantization_field(root).is_some()
}

fn field_err(path: &Path, field: &str, expected: &str, found: &Value) -> ModelError {
    ModelError::ConfigField {
        path: path.to_path_buf(),
        field: field.to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

/// Reads one settings object (`field` names it in errors), with `default` for absent fields.
fn params_of(
    v: &Value,
    field: &str,
    default: Option<&QuantParams>,
    path: &Path,
) -> Result<QuantParams> {
    let Some(obj) = v.as_object() else {
        return Err(field_err(
            path,
            field,
            "an object with group_size, bits and mode",
            v,
        ));
    };
    if let Some(mode) = obj.get("mode") {
        if mode.as_str() != Some("affine") {
            return Err(field_err(
                path,
                &format!("{field}.mode"),
                "\"affine\" (mxfp4, mxfp8 and nvfp4 are not supported)",
                mode,
            ));
        }
    }
    let bits = match obj.get("bits") {
        Some(b) => match b.as_u64().and_then(|b| u32::try_from(b).ok()) {
            Some(b) if BITS.contains(&b) => b,
            _ => {
                return Err(field_err(
                    path,
                    &format!("{field}.bits"),
                    "2, 3, 4, 5, 6 or 8",
                    b,
                ))
            }
        },
        None => match default {
            Some(d) => d.bits,
            None => 4,
        },
    };
    let group_size = match obj.get("group_size") {
        Some(g) => match g.as_u64().and_then(|g| usize::try_from(g).ok()) {
            Some(g) if GROUP_SIZES.contains(&g) => g,
            _ => {
                return Err(field_err(
                    path,
                    &format!("{field}.group_size"),
                    "32, 64 or 128",
                    g,
                ))
            }
        },
        None => match default {
            Some(d) => d.group_size,
            None => 64,
        },
    };
    Ok(QuantParams { group_size, bits })
}

/// The checkpoint's quantization: the default settings and each override (`None` for a
/// module left unquantized), from config.json `root` (`path` names it in errors).
pub struct Quantization {
    /// The settings of modules the config does not name.
    pub default: QuantParams,
    overrides: Vec<(String, Option<QuantParams>)>,
}

impl Quantization {
    /// Parses the quantization of config.json `root`; `None` when it has none.
    pub fn of(root: &Value, path: &Path) -> Result<Option<Self>> {
        let Some(field) = quantization_field(root) else {
            return Ok(None);
        };
        let q = &root[field];
        let default = params_of(q, field, None, path)?;
        let mut overrides = Vec::new();
        for (k, v) in q.as_object().into_iter().flatten() {
            if ["group_size", "bits", "mode"].contains(&k.as_str()) {
                continue;
            }
            let p = match v {
                Value::Bool(false) => None,
                Value::Bool(true) => Some(default.clone()),
                Value::Object(_) => {
                    Some(params_of(v, &format!("{field}.{k}"), Some(&default), path)?)
                }
                other => {
                    return Err(field_err(
                        path,
                        &format!("{field}.{k}"),
                        "an object with group_size, bits and mode, or false",
                        other,
                    ))
                }
            };
            overrides.push((k.clone(), p));
        }
        Ok(Some(Quantization { default, overrides }))
    }

    /// The settings of `module` (`None`: left unquantized).
    pub fn params(&self, module: &str) -> Option<&QuantParams> {
        match self.overrides.iter().find(|(k, _)| k == module) {
            Some((_, p)) => p.as_ref(),
            None => Some(&self.default),
        }
    }
}

/// The config of an MLX checkpoint (config.json `root`, read from `path`): a flat config under
/// model_type `qwen3_5` / `qwen3_5_moe` is read as the text config it is (as mlx-lm does), and
/// `layer_types`, if given, must agree with `full_attention_interval`, which mlx-lm follows.
pub fn read_config(root: &Value, path: &Path) -> Result<ModelConfig> {
    let mut root = root.clone();
    if root.get("text_config").is_none() {
        let text_type = match root.get("model_type").and_then(Value::as_str) {
            Some("qwen3_5") => Some("qwen3_5_text"),
            Some("qwen3_5_moe") => Some("qwen3_5_moe_text"),
            _ => None,
        };
        if let Some(t) = text_type {
            root["model_type"] = Value::from(t);
        }
    }
    let cfg = ModelConfig::from_value(&root, path)?;
    let tc = root.get("text_config").unwrap_or(&root);
    if tc.get("layer_types").is_some_and(|v| !v.is_null()) {
        let interval = tc
            .get("full_attention_interval")
            .and_then(Value::as_u64)
            .unwrap_or(4)
            .max(1) as usize;
        let by_interval = (0..cfg.num_layers()).all(|i| {
            let full = (i + 1) % interval == 0;
            full == (cfg.layer_types[i] == super::LayerKind::Full)
        });
        if !by_interval {
            return Err(field_err(
                path,
                "layer_types",
                &format!(
                    "every {interval}th layer full attention, as full_attention_interval \
                     ({interval}) makes mlx-lm run it"
                ),
                &tc["layer_types"],
            ));
        }
    }
    Ok(cfg)
}

/// Opens the MLX quantized checkpoint in `dir` (config.json `root` read from `config_path`):
/// its tensors mapped, each quantized module's weight kept packed (4 and 8 bits) or
/// dequantized to f32 (other widths).
pub fn open(dir: &Path, root: &Value, config_path: &Path) -> Result<WeightStore> {
    let q = Quantization::of(root, config_path)?.ok_or_else(|| ModelError::ConfigField {
        path: config_path.to_path_buf(),
        field: "quantization".into(),
        expected: "mlx-lm's quantization settings".into(),
        found: "nothing".into(),
    })?;
    let mut ws = WeightStore::open(dir)?;
    ws.set_conventions(Conventions::Mlx);
    read_quantized(&mut ws, &q, config_path)?;
    Ok(ws)
}

/// True for a tensor of MLX packed values (U32, which the model itself does not read).
fn is_packed(e: &Entry) -> bool {
    matches!(&e.dtype, Err(d) if d == "U32")
}

/// Refuses MLX packed weights (a U32 `X.weight` beside an `X.scales`) in a checkpoint whose
/// config has no quantization settings to read them with.
pub fn check_unquantized(ws: &WeightStore, config_path: &Path) -> Result<()> {
    let mut names: Vec<&str> = ws.names().collect();
    names.sort_unstable();
    for name in names {
        let packed = ws.entry(name).is_some_and(is_packed);
        let module = name.strip_suffix(".weight").unwrap_or(name);
        if packed && ws.contains(&format!("{module}.scales")) {
            return Err(ModelError::Quantized {
                path: ws.file_of(name).unwrap_or(config_path).to_path_buf(),
                tensor: name.to_string(),
                message: format!(
                    "U32 with scales (MLX packed quantized values) but {} has no \
                     `quantization` settings to read them with",
                    config_path.display()
                ),
            });
        }
    }
    Ok(())
}

/// Replaces every quantized module's packed weight in `ws` by an affine-quantized tensor that
/// carries its scales and biases (4 and 8 bits) or by its f32 dequantization (other widths),
/// taking the scales and biases out of the store, and views the conv weights as Hugging
/// Face's `[conv_dim, 1, kc]`.
pub fn read_quantized(ws: &mut WeightStore, q: &Quantization, config_path: &Path) -> Result<()> {
    let dir = config_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut names: Vec<String> = ws.names().map(str::to_string).collect();
    names.sort_unstable();
    for name in &names {
        if let Some(module) = name.strip_suffix(".scales") {
            if ws.contains(&format!("{module}.weight")) {
                read_module(ws, q, module, config_path)?;
            }
        }
    }
    for name in &names {
        let Some(e) = ws.entry(name) else { continue };
        if is_packed(e) {
            let module = name.strip_suffix(".weight").unwrap_or(name);
            return Err(ModelError::MissingTensor {
                path: ws.file_of(name).unwrap_or(&dir).to_path_buf(),
                tensor: format!(
                    "{module}.scales (`{name}` is U32, packed quantized values, and needs its \
                     scales and biases)"
                ),
            });
        }
        if name.ends_with("linear_attn.conv1d.weight") && e.shape.len() == 3 && e.shape[2] == 1 {
            let mut e = ws.remove(name).expect("present");
            e.shape = vec![e.shape[0], 1, e.shape[1]];
            ws.insert(name.clone(), e);
        }
    }
    Ok(())
}

/// Reads the module `module` (`{module}.weight`, `.scales`, `.biases`) after checking them
/// against its settings: its weight stays packed, carrying the scales and biases, when the
/// kernels read its width, else it is dequantized in place.
fn read_module(
    ws: &mut WeightStore,
    q: &Quantization,
    module: &str,
    config_path: &Path,
) -> Result<()> {
    let wname = format!("{module}.weight");
    let sname = format!("{module}.scales");
    let bname = format!("{module}.biases");
    let (wfile, wbytes) = ws.entry_bytes(&wname).expect("checked by the caller");
    let wfile = wfile.to_path_buf();
    let err = |tensor: &str, message: String| ModelError::Quantized {
        path: wfile.clone(),
        tensor: tensor.to_string(),
        message,
    };
    let p = q.params(module).ok_or_else(|| {
        err(
            &sname,
            format!(
                "{} says `{module}` is not quantized (false), but the checkpoint has its scales",
                config_path.display()
            ),
        )
    })?;
    let (bits, group) = (p.bits, p.group_size);
    let we = ws.entry(&wname).expect("present");
    match &we.dtype {
        Err(d) if d == "U32" => {}
        Err(d) => {
            return Err(err(
                &wname,
                format!("dtype {d}, expected U32 (packed values)"),
            ))
        }
        Ok(d) => {
            return Err(err(
                &wname,
                format!("dtype {}, expected U32 (packed values)", d.name()),
            ))
        }
    }
    let [rows, packed] = we.shape[..] else {
        return Err(err(
            &wname,
            format!("shape {:?}, expected 2 dimensions", we.shape),
        ));
    };
    if !(packed * 32).is_multiple_of(bits as usize) {
        return Err(err(
            &wname,
            format!("{packed} U32 words per row do not hold a whole number of {bits}-bit values"),
        ));
    }
    let cols = packed * 32 / bits as usize;
    if !cols.is_multiple_of(group) {
        return Err(err(
            &wname,
            format!(
                "{cols} values per row ({packed} words of {bits}-bit values) are not a multiple \
                 of group_size {group}"
            ),
        ));
    }
    let groups = cols / group;
    let st = ws.tensor(&sname)?;
    if !ws.contains(&bname) {
        return Err(ModelError::MissingTensor {
            path: wfile,
            tensor: format!("{bname} (`{module}` has scales; affine quantization needs biases)"),
        });
    }
    let bt = ws.tensor(&bname)?;
    for t in [&st, &bt] {
        if t.shape[..] != [rows, groups] {
            return Err(ModelError::Quantized {
                path: t.file.clone(),
                tensor: t.name.clone(),
                message: format!(
                    "shape {:?}, expected [{rows}, {groups}] ({cols} values per row of \
                     `{wname}` at {bits} bits in groups of {group})",
                    t.shape
                ),
            });
        }
    }
    if st.dtype != bt.dtype {
        return Err(ModelError::Quantized {
            path: bt.file,
            tensor: bname,
            message: format!(
                "dtype {}, unlike its scales' {}",
                bt.dtype.name(),
                st.dtype.name()
            ),
        });
    }
    let Storage::Float(sd) = st.dtype else {
        return Err(ModelError::Quantized {
            path: st.file,
            tensor: sname,
            message: format!("dtype {}, expected a float dtype", st.dtype.name()),
        });
    };
    if let Some(format) = AffineFormat::new(bits, group) {
        let (scales, biases) = (ws.remove(&sname), ws.remove(&bname));
        let mut e = ws.remove(&wname).expect("present");
        e.dtype = Ok(Storage::Affine(format, sd));
        e.shape = vec![rows, cols];
        e.affine = Some(Box::new(AffineParts {
            scales: scales.expect("present"),
            biases: biases.expect("present"),
        }));
        ws.insert(wname, e);
        return Ok(());
    }
    let (scales, biases) = (st.to_f32_vec(), bt.to_f32_vec());
    let mut out = vec![0.0f32; rows * cols];
    if cols > 0 {
        out.par_chunks_mut(cols)
            .zip(wbytes.par_chunks(packed * 4))
            .zip(scales.par_chunks(groups).zip(biases.par_chunks(groups)))
            .for_each(|((row, bytes), (s, b))| dequantize_row(bytes, s, b, bits, group, sd, row));
    }
    ws.remove(&sname);
    ws.remove(&bname);
    ws.insert_f32(wname, &wfile, out, vec![rows, cols], Activations::F32);
    Ok(())
}

/// Unpacks `out.len()` values of `bits` bits from the little-endian bit stream `packed`
/// (value `j` in bits `j * bits .. (j + 1) * bits`).
pub fn unpack_row(packed: &[u8], bits: u32, out: &mut [u32]) {
    for (j, o) in out.iter_mut().enumerate() {
        *o = value_at(packed, bits, j);
    }
}

/// Value `j` of `bits` bits of the little-endian bit stream `packed`.
fn value_at(packed: &[u8], bits: u32, j: usize) -> u32 {
    let bit = j * bits as usize;
    let (byte, shift) = (bit / 8, bit % 8);
    let lo = packed[byte] as u32;
    let hi = packed.get(byte + 1).copied().unwrap_or(0) as u32;
    ((lo | (hi << 8)) >> shift) & ((1u32 << bits) - 1)
}

/// Rounds `x` to `dtype` (round to nearest even), as f32.
fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        DType::F16 => half::f16::from_f32(x).to_f32(),
        DType::F32 => x,
    }
}

/// One row's values as `mx.dequantize` computes them, in the scales' dtype `dtype`:
/// `round(round(s * q) + b)`.
pub fn dequantize_row(
    packed: &[u8],
    scales: &[f32],
    biases: &[f32],
    bits: u32,
    group: usize,
    dtype: DType,
    out: &mut [f32],
) {
    for (j, o) in out.iter_mut().enumerate() {
        let (s, b) = (scales[j / group], biases[j / group]);
        let q = value_at(packed, bits, j) as f32;
        *o = round_to(dtype, round_to(dtype, s * q) + b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn unpack(w: &[u32], bits: u32, n: usize) -> Vec<u32> {
        let mut out = vec![0; n];
        unpack_row(&words(w), bits, &mut out);
        out
    }

    #[test]
    fn unpacks_hand_built_rows_of_4_and_8_bits() {
        assert_eq!(
            unpack(&[0x7654_3210, 0xfedc_ba98], 4, 16),
            (0..16).collect::<Vec<_>>()
        );
        assert_eq!(
            unpack(&[0x0302_0100, 0xff80_7f05], 8, 8),
            [0, 1, 2, 3, 5, 127, 128, 255]
        );
    }

    /// Words and values from `mx.quantize` (mlx 0.32.4) of one row of 32 integers with scale -1
    /// and bias 2^bits - 1, values crossing word boundaries for 3, 5 and 6 bits.
    #[test]
    fn unpacks_mlx_rows_of_2_3_5_and_6_bits() {
        let cases: [(u32, &[u32], [u32; 32]); 4] = [
            (
                2,
                &[0xf9ac9633, 0x032ac73f],
                [
                    3, 0, 3, 0, 2, 1, 1, 2, 0, 3, 2, 2, 1, 2, 3, 3, 3, 3, 3, 0, 3, 1, 0, 3, 2, 2,
                    2, 0, 3, 0, 0, 0,
                ],
            ),
            (
                3,
                &[0x18e92887, 0x53d5f85a, 0xe51f480f],
                [
                    7, 0, 2, 4, 2, 2, 2, 7, 0, 3, 0, 5, 5, 0, 6, 7, 5, 2, 7, 1, 5, 6, 3, 0, 0, 1,
                    5, 7, 1, 2, 1, 7,
                ],
            ),
            (
                5,
                &[0xf229541f, 0xcaecd6ab, 0x6a2d4df7, 0xdbafb063, 0xc05f67bc],
                [
                    31, 0, 21, 18, 2, 25, 15, 21, 22, 6, 27, 21, 28, 27, 23, 9, 13, 17, 26, 6, 6,
                    24, 30, 21, 27, 6, 15, 15, 22, 15, 1, 24,
                ],
            ),
            (
                6,
                &[
                    0x8812b03f, 0x1a2224ae, 0x1329940c, 0x2bc1472e, 0x65035334, 0x5a9c4289,
                ],
                [
                    63, 0, 43, 4, 8, 58, 10, 9, 34, 40, 1, 3, 20, 38, 50, 4, 46, 28, 20, 48, 43,
                    16, 51, 20, 3, 20, 22, 34, 2, 49, 41, 22,
                ],
            ),
        ];
        for (bits, w, q) in cases {
            assert_eq!(unpack(w, bits, 32), q, "{bits} bits");
            // The dequantized values are the integers back: -q + (2^bits - 1).
            let mut out = [0.0f32; 32];
            let top = ((1u32 << bits) - 1) as f32;
            dequantize_row(&words(w), &[-1.0], &[top], bits, 32, DType::BF16, &mut out);
            let back: Vec<u32> = out.iter().map(|&v| (top - v) as u32).collect();
            assert_eq!(back, q, "{bits} bits");
        }
    }

    #[test]
    fn dequantizes_in_the_scales_dtype() {
        // With bf16 scales the sum is rounded to bf16 (1.03125), f32 scales keep 1.0322266.
        let s = half::bf16::from_f32(0.0107421875).to_f32();
        let mut out = [0.0f32; 1];
        dequantize_row(&[3], &[s], &[1.0], 8, 32, DType::BF16, &mut out);
        assert_eq!(out[0], half::bf16::from_f32(1.0 + s * 3.0).to_f32());
        dequantize_row(&[3], &[s], &[1.0], 8, 32, DType::F32, &mut out);
        assert_eq!(out[0], 1.0 + s * 3.0);
    }

    fn config(q: &str) -> Value {
        serde_json::from_str(&format!(
            r#"{{"model_type": "qwen3_5", "quantization": {q}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn reads_defaults_and_per_module_overrides() {
        let root = config(
            r#"{"group_size": 64, "bits": 4, "mode": "affine",
                "m.a": {"group_size": 32, "bits": 8}, "m.b": false, "m.c": {"bits": 6}}"#,
        );
        let q = Quantization::of(&root, Path::new("c.json"))
            .unwrap()
            .unwrap();
        let p = |g, b| {
            Some(QuantParams {
                group_size: g,
                bits: b,
            })
        };
        assert_eq!(q.params("m.a").cloned(), p(32, 8));
        assert_eq!(q.params("m.b"), None);
        assert_eq!(q.params("m.c").cloned(), p(64, 6));
        assert_eq!(q.params("m.d").cloned(), p(64, 4));
        let none: Value =
            serde_json::from_str(r#"{"quantization_config": {"quant_method": "fp8"}}"#).unwrap();
        assert!(!is_mlx_quantized(&none));
        assert!(Quantization::of(&none, Path::new("c.json"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn refuses_unsupported_settings_naming_the_field() {
        for (q, field) in [
            (r#"{"group_size": 64, "bits": 7}"#, "quantization.bits"),
            (
                r#"{"group_size": 48, "bits": 4}"#,
                "quantization.group_size",
            ),
            (
                r#"{"group_size": 32, "bits": 4, "mode": "mxfp4"}"#,
                "quantization.mode",
            ),
            (
                r#"{"group_size": 64, "bits": 4, "x.y": {"bits": 1}}"#,
                "quantization.x.y.bits",
            ),
            (
                r#"{"group_size": 64, "bits": 4, "x.y": 3}"#,
                "quantization.x.y",
            ),
        ] {
            let e = Quantization::of(&config(q), Path::new("c.json"))
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains(&format!("`{field}`")) && e.contains("c.json"),
                "{e}"
            );
        }
    }

    /// A tensor to write: name, dtype, shape, bytes.
    type TestTensor<'a> = (&'a str, &'a str, Vec<usize>, Vec<u8>);

    /// Writes a safetensors file of `tensors` (name, dtype, shape, bytes) and config.json.
    fn checkpoint(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape,
                    "data_offsets": [data.len(), data.len() + bytes.len()]}),
            );
            data.extend_from_slice(bytes);
        }
        let mut h = Value::Object(header).to_string().into_bytes();
        while !h.len().is_multiple_of(8) {
            h.push(b' ');
        }
        let mut file = (h.len() as u64).to_le_bytes().to_vec();
        file.extend(h);
        file.extend(data);
        std::fs::write(dir.path().join("model.safetensors"), file).unwrap();
        dir
    }

    fn bf16s(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes())
            .collect()
    }

    fn open_with(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)], q: &str) -> Result<WeightStore> {
        let dir = checkpoint(tensors);
        let root = config(q);
        let cfg = dir.path().join("config.json");
        open(dir.path(), &root, &cfg)
    }

    const Q4: &str = r#"{"group_size": 32, "bits": 4, "mode": "affine"}"#;

    #[test]
    fn dequantizes_a_module_to_its_hugging_face_shape_and_drops_scales() {
        let w = words(&[0x7654_3210, 0xfedc_ba98, 0x0, 0x1111_1111]);
        let ws = open_with(
            &[
                ("m.weight", "U32", vec![1, 4], w),
                ("m.scales", "BF16", vec![1, 1], bf16s(&[0.5])),
                ("m.biases", "BF16", vec![1, 1], bf16s(&[-1.0])),
                (
                    "c.linear_attn.conv1d.weight",
                    "BF16",
                    vec![6, 4, 1],
                    bf16s(&[0.0; 24]),
                ),
            ],
            Q4,
        )
        .unwrap();
        let t = ws.get("m.weight", &[1, 32]).unwrap();
        let v = t.to_f32_vec();
        assert_eq!(v[..4], [-1.0, -0.5, 0.0, 0.5]);
        assert_eq!(v[31], -0.5);
        assert!(!ws.contains("m.scales") && !ws.contains("m.biases"));
        assert!(ws.get("c.linear_attn.conv1d.weight", &[6, 1, 4]).is_ok());
        assert_eq!(ws.conventions(), Conventions::Mlx);
    }

    #[test]
    fn refuses_bad_inputs_naming_the_file_and_tensor() {
        let w = || words(&[0; 4]);
        let s = |n: usize| bf16s(&vec![1.0; n]);
        let cases: Vec<(Vec<TestTensor>, &str, &str)> = vec![
            (
                vec![
                    ("m.weight", "U32", vec![1, 4], w()),
                    ("m.scales", "BF16", vec![1, 1], s(1)),
                ],
                Q4,
                "m.biases",
            ),
            (vec![("m.weight", "U32", vec![1, 4], w())], Q4, "m.scales"),
            (
                vec![
                    ("m.weight", "U32", vec![1, 4], w()),
                    ("m.scales", "BF16", vec![1, 2], s(2)),
                    ("m.biases", "BF16", vec![1, 2], s(2)),
                ],
                Q4,
                "expected [1, 1]",
            ),
            (
                vec![
                    ("m.weight", "U32", vec![1, 4], w()),
                    ("m.scales", "BF16", vec![1, 1], s(1)),
                    ("m.biases", "BF16", vec![1, 1], s(1)),
                ],
                r#"{"group_size": 64, "bits": 4}"#,
                "not a multiple of group_size 64",
            ),
            (
                vec![
                    ("m.weight", "U32", vec![1, 3], words(&[0; 3])),
                    ("m.scales", "BF16", vec![1, 1], s(1)),
                    ("m.biases", "BF16", vec![1, 1], s(1)),
                ],
                r#"{"group_size": 32, "bits": 5}"#,
                "whole number of 5-bit values",
            ),
            (
                vec![
                    ("m.weight", "BF16", vec![1, 32], s(32)),
                    ("m.scales", "BF16", vec![1, 1], s(1)),
                    ("m.biases", "BF16", vec![1, 1], s(1)),
                ],
                Q4,
                "expected U32",
            ),
            (
                vec![
                    ("m.weight", "U32", vec![1, 4], w()),
                    ("m.scales", "BF16", vec![1, 1], s(1)),
                    ("m.biases", "BF16", vec![1, 1], s(1)),
                ],
                r#"{"group_size": 32, "bits": 4, "m": false}"#,
                "not quantized (false)",
            ),
        ];
        for (tensors, q, want) in cases {
            let e = open_with(&tensors, q).err().expect(want).to_string();
            assert!(
                e.contains(want) && e.contains("model.safetensors"),
                "{want}: {e}"
            );
        }
        // U32 weights in a checkpoint without quantization settings.
        let dir = checkpoint(&[
            ("m.weight", "U32", vec![1, 4], w()),
            ("m.scales", "BF16", vec![1, 1], s(1)),
        ]);
        let ws = WeightStore::open(dir.path()).unwrap();
        let e = check_unquantized(&ws, &dir.path().join("config.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.weight") && e.contains("no `quantization`"),
            "{e}"
        );
    }

    #[test]
    fn reads_a_flat_qwen3_5_config_and_checks_the_interval() {
        let base = r#""vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 8,
            "intermediate_size": 8, "rope_theta": 10000.0, "linear_key_head_dim": 8,
            "linear_value_head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 1,
            "quantization": {"group_size": 64, "bits": 4}, "model_type": "qwen3_5""#;
        let root: Value = serde_json::from_str(&format!(
            r#"{{{base}, "full_attention_interval": 2,
                "layer_types": ["linear_attention", "full_attention"]}}"#
        ))
        .unwrap();
        let cfg = read_config(&root, Path::new("c.json")).unwrap();
        assert_eq!(
            cfg.layer_types,
            [
                super::super::LayerKind::Linear,
                super::super::LayerKind::Full
            ]
        );
        let bad: Value = serde_json::from_str(&format!(
            r#"{{{base}, "layer_types": ["linear_attention", "full_attention"]}}"#
        ))
        .unwrap();
        let e = read_config(&bad, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`layer_types`") && e.contains("full_attention_interval"),
            "{e}"
        );
    }
}
