//! A checkpoint's weights by their Hugging Face names, read in their stored dtype: memory-mapped
//! safetensors (single file or sharded), or a GGUF file's tensors ([`super::gguf`]).
//!
//! Mapped tensors are never copied out of the mapping: a [`Tensor`] is a byte range in a shared
//! blob (a file mapping, or memory the loader filled) plus its dtype and shape; callers convert
//! rows or tiles to f32 on the fly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::error::{ModelError, Result};
use crate::ops::{Activations, AffineFormat, KvRounding, QuantFormat, Queries};

/// Storage dtype of a weight tensor (or of the KV cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// bfloat16.
    BF16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::BF16 | DType::F16 => 2,
            DType::F32 => 4,
        }
    }
    /// The safetensors spelling.
    pub fn name(self) -> &'static str {
        match self {
            DType::BF16 => "BF16",
            DType::F16 => "F16",
            DType::F32 => "F32",
        }
    }
}

/// How a weight tensor's bytes are stored: elements of a float dtype, blocks of a ggml format
/// (a GGUF checkpoint's quantized weight), or values in mlx's affine quantization (an MLX
/// checkpoint's 4- or 8-bit module; the dtype is that of its scales and biases, which travel
/// with it, [`AffineParts`]). The LOOM kernels read the quantized ones as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    Float(DType),
    Quant(QuantFormat),
    Affine(AffineFormat, DType),
}

impl Storage {
    /// The dtype's or the format's name (`BF16`, `Q4_K`).
    pub fn name(self) -> &'static str {
        match self {
            Storage::Float(d) => d.name(),
            Storage::Quant(q) => q.name(),
            Storage::Affine(f, _) => f.name(),
        }
    }

    /// Elements and bytes of the smallest unit stored: one element, one block, or one word.
    fn unit(self) -> (usize, usize) {
        match self {
            Storage::Float(d) => (1, d.size()),
            Storage::Quant(q) => (q.block_elems(), q.block_bytes()),
            Storage::Affine(f, _) => (f.per_word(), 4),
        }
    }
}

/// The scales and biases of a weight in mlx's affine quantization ([`Storage::Affine`]),
/// `[rows, cols / group]` each, in the float dtype the storage names.
#[derive(Clone, Debug)]
pub struct AffineParts<T> {
    pub scales: T,
    pub biases: T,
}

impl From<DType> for Storage {
    fn from(d: DType) -> Self {
        Storage::Float(d)
    }
}

/// Converts `out.len()` elements of `dtype` stored little-endian in `bytes` to f32.
pub fn to_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        DType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        DType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
    }
}

/// Bytes that tensors point into: a file mapping, or memory a loader filled.
pub trait Bytes: Send + Sync {
    /// All the bytes.
    fn bytes(&self) -> &[u8];

    /// Says that `range` of the bytes will not be read for a while (a weight copied into
    /// another layout at load), so their pages may leave the resident set: a file mapping's
    /// are read from the file again if they are. Does nothing for memory a loader filled.
    fn release(&self, _range: std::ops::Range<usize>) {}
}

/// Bytes that tensors point into, shared.
pub type Blob = Arc<dyn Bytes>;

/// A read-only mapping of a file (a checkpoint), whose pages can be released and read again.
pub struct FileMap(pub Mmap);

impl Bytes for FileMap {
    fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn release(&self, range: std::ops::Range<usize>) {
        let len = range.end.saturating_sub(range.start);
        if len == 0 || range.end > self.0.len() {
            return;
        }
        // SAFETY: the mapping is a read-only view of a file that LSE never writes; dropping
        // its pages loses nothing, since a later read faults them in from the file again.
        // The advice is only advice: when it fails, the pages stay resident.
        let _ = unsafe {
            self.0
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, len)
        };
    }
}

/// An anonymous read-only mapping filled by a loader (a GGUF file given as bytes).
impl Bytes for Mmap {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Bytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// f32 values a loader computed (a dequantized MLX tensor), as a [`Blob`] aligned for f32.
pub struct F32Blob(pub Vec<f32>);

impl Bytes for F32Blob {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// One tensor: a byte range inside a blob (a memory-mapped file or loader memory).
#[derive(Clone)]
pub struct Tensor {
    map: Blob,
    start: usize,
    end: usize,
    /// How the bytes are stored.
    pub dtype: Storage,
    /// Stored shape.
    pub shape: Vec<usize>,
    /// How activations meet the tensor in a product ([`Entry::act`]).
    pub act: Activations,
    /// Full tensor name in the file.
    pub name: String,
    /// File the tensor lives in.
    pub file: PathBuf,
    /// The scales and biases of an affine-quantized tensor (present exactly then).
    affine: Option<Box<AffineParts<Tensor>>>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?} {:?})", self.name, self.dtype, self.shape)
    }
}

impl Tensor {
    /// Raw little-endian bytes of the whole tensor.
    pub fn bytes(&self) -> &[u8] {
        &self.map.bytes()[self.start..self.end]
    }

    /// Lets the tensor's pages leave the resident set until it is read again
    /// ([`Bytes::release`]): for a tensor the loader has copied into another layout.
    pub fn release(&self) {
        self.map.release(self.start..self.end);
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// The scales and biases of an affine-quantized tensor ([`Storage::Affine`]).
    pub fn affine(&self) -> Option<&AffineParts<Tensor>> {
        self.affine.as_deref()
    }

    /// Converts elements `[first, first + out.len())` (flat index) to f32; for a block
    /// format both ends must fall on block boundaries, and blocks are dequantized as ggml's
    /// reference code does; for an affine-quantized tensor `first` must start a group, and
    /// the values are dequantized as `mx.dequantize` computes them.
    pub fn read_f32(&self, first: usize, out: &mut [f32]) {
        let (per, size) = self.dtype.unit();
        let b = &self.bytes()[first / per * size..(first + out.len()) / per * size];
        match self.dtype {
            Storage::Float(d) => to_f32(d, b, out),
            Storage::Quant(q) => super::gguf::dequantize_row(q.into(), b, out),
            Storage::Affine(f, dtype) => {
                let parts = self
                    .affine()
                    .expect("WeightStore::get gives an affine tensor its scales and biases");
                let groups = first / f.group()..(first + out.len()).div_ceil(f.group());
                let (mut scales, mut biases) = (vec![0.0; groups.len()], vec![0.0; groups.len()]);
                parts.scales.read_f32(groups.start, &mut scales);
                parts.biases.read_f32(groups.start, &mut biases);
                let (bits, group) = (f.bits(), f.group());
                super::mlx::dequantize_row(b, &scales, &biases, bits, group, dtype, out);
            }
        }
    }
    /// The whole tensor as f32 (use only for small vectors).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.numel()];
        self.read_f32(0, &mut v);
        v
    }
}

/// Where a tensor's bytes are; a dtype we cannot read is kept by name and reported when used.
pub struct Entry {
    /// Index of the blob (from [`WeightStore::add_blob`]).
    pub blob: usize,
    /// First byte in the blob.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// How the bytes are stored, or the name of a dtype LSE cannot read.
    pub dtype: std::result::Result<Storage, String>,
    /// Shape, outermost dimension first.
    pub shape: Vec<usize>,
    /// How activations meet this weight in a product, as the checkpoint's reference computes
    /// it (f32 for Hugging Face checkpoints; llama.cpp's rules for a GGUF's).
    pub act: Activations,
    /// The scales and biases of an affine-quantized tensor ([`Storage::Affine`]): entries of
    /// their own, named `<module>.scales` and `<module>.biases` in errors.
    pub affine: Option<Box<AffineParts<Entry>>>,
}

/// Whose conventions a checkpoint's values follow where Hugging Face and llama.cpp differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conventions {
    /// As transformers reads them: zero-centred norm weights (applied as `1 + w`) and the
    /// DeltaNet decay as `A_log`.
    HuggingFace,
    /// As llama.cpp's GGUF converter writes them: the 1 added to those norm weights, the decay
    /// rate stored as `ssm_a = -exp(A_log)`.
    LlamaCpp,
    /// As mlx-lm writes them (its `sanitize`, saved by `mlx_lm convert`): the 1 added to the
    /// zero-centred norm weights (in the stored dtype), the decay as raw `A_log`.
    Mlx,
}

/// All tensors of a checkpoint by Hugging Face name.
pub struct WeightStore {
    dir: PathBuf,
    conventions: Conventions,
    maps: Vec<(PathBuf, Blob)>,
    entries: HashMap<String, Entry>,
    /// Whether activations meet 16-bit float weights rounded to their dtype, as llama.cpp's
    /// CPU backend has them (a GGUF file, or after
    /// [`WeightStore::round_activations_to_weight_dtype`]).
    rounds_like_llama_cpp: bool,
}

impl WeightStore {
    /// Opens `model.safetensors.index.json` (sharded) or `model.safetensors`, or else every
    /// `*.safetensors` file in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if index.exists() {
            shard_files(&index)?
                .into_iter()
                .map(|f| dir.join(f))
                .collect()
        } else if dir.join("model.safetensors").exists() {
            vec![dir.join("model.safetensors")]
        } else {
            let rd = std::fs::read_dir(dir).map_err(|e| ModelError::io(dir, e))?;
            let mut v: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            v.sort();
            if v.is_empty() {
                return Err(ModelError::MissingFile {
                    path: dir.join("model.safetensors"),
                    what: "model weights (no model.safetensors, no model.safetensors.index.json, no *.safetensors)".into(),
                });
            }
            v
        };
        let mut store = WeightStore::empty(dir, Conventions::HuggingFace);
        for f in files {
            store.add_file(&f)?;
        }
        Ok(store)
    }

    /// A store with no tensors; `source` (the checkpoint's path) names it in errors.
    pub fn empty(source: &Path, conventions: Conventions) -> Self {
        WeightStore {
            dir: source.to_path_buf(),
            conventions,
            maps: Vec::new(),
            entries: HashMap::new(),
            rounds_like_llama_cpp: conventions == Conventions::LlamaCpp,
        }
    }

    /// The weight of a zero-centred RMSNorm (`[len]`) as the norm kernels multiply by it:
    /// `1 + w` in f32 for a Hugging Face checkpoint (as transformers computes it), as stored
    /// for llama.cpp's (whose converter added the 1 in f32) and mlx-lm's (which added it in
    /// the checkpoint's dtype).
    pub fn norm_weight(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let mut w = self.get(name, &[len])?.to_f32_vec();
        if self.conventions == Conventions::HuggingFace {
            w.iter_mut().for_each(|x| *x += 1.0);
        }
        Ok(w)
    }

    /// The DeltaNet decay rate `-exp(A_log)` (`[hv]`) of the layer whose names start with
    /// `prefix`: from `{prefix}linear_attn.A_log` (exp in f32), or as llama.cpp stores it
    /// (`{prefix}linear_attn.ssm_a`).
    pub fn decay_rate(&self, prefix: &str, hv: usize) -> Result<Vec<f32>> {
        Ok(match self.conventions {
            Conventions::HuggingFace | Conventions::Mlx => self
                .get(&format!("{prefix}linear_attn.A_log"), &[hv])?
                .to_f32_vec()
                .into_iter()
                .map(|a| -a.exp())
                .collect(),
            Conventions::LlamaCpp => self
                .get(&format!("{prefix}linear_attn.ssm_a"), &[hv])?
                .to_f32_vec(),
        })
    }

    /// Adds a blob that entries can point into (`path` names it in errors); returns its index.
    pub fn add_blob(&mut self, path: &Path, blob: Blob) -> usize {
        self.maps.push((path.to_path_buf(), blob));
        self.maps.len() - 1
    }

    /// Sets whose conventions the values follow.
    pub fn set_conventions(&mut self, conventions: Conventions) {
        self.conventions = conventions;
    }

    /// Whose conventions the values follow.
    pub fn conventions(&self) -> Conventions {
        self.conventions
    }

    /// The entry of `name`, whatever its dtype (one LSE cannot read included).
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// The file and raw stored bytes of the tensor `name`, whatever its dtype (for loaders
    /// that decode dtypes the model does not read, such as MLX's packed U32 weights).
    pub fn entry_bytes(&self, name: &str) -> Option<(&Path, &[u8])> {
        let e = self.entries.get(name)?;
        let (file, blob) = &self.maps[e.blob];
        Some((file.as_path(), &blob.bytes()[e.start..e.end]))
    }

    /// The file the blob of the tensor `name` belongs to.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        let e = self.entries.get(name)?;
        Some(self.maps[e.blob].0.as_path())
    }

    /// Removes the tensor `name`, returning its entry.
    pub fn remove(&mut self, name: &str) -> Option<Entry> {
        self.entries.remove(name)
    }

    /// Adds (or replaces) the tensor `name`.
    pub fn insert(&mut self, name: String, entry: Entry) {
        self.entries.insert(name, entry);
    }

    /// Adds (or replaces) the tensor `name` as f32 `values` a loader computed (a dequantized
    /// weight) of `shape`, from the file `source` (named in errors), meeting activations as
    /// `act` says.
    pub fn insert_f32(
        &mut self,
        name: String,
        source: &Path,
        values: Vec<f32>,
        shape: Vec<usize>,
        act: Activations,
    ) {
        let end = values.len() * 4;
        let blob = self.add_blob(source, Arc::new(F32Blob(values)));
        self.insert(
            name,
            Entry {
                blob,
                start: 0,
                end,
                dtype: Ok(DType::F32.into()),
                shape,
                act,
                affine: None,
            },
        );
    }

    fn add_file(&mut self, path: &Path) -> Result<()> {
        let file = std::fs::File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ModelError::MissingFile {
                    path: path.to_path_buf(),
                    what: "weight shard".into(),
                }
            } else {
                ModelError::io(path, e)
            }
        })?;
        // SAFETY: the file is opened read-only; LSE never writes model files while they are
        // mapped. Concurrent external modification is outside our contract (as for any mmap).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        let fi = self.maps.len();
        for t in super::safetensors_file::parse(&map, path)? {
            self.entries.insert(
                t.name,
                Entry {
                    blob: fi,
                    start: t.start,
                    end: t.end,
                    dtype: t.dtype.map(Storage::Float),
                    shape: t.shape,
                    act: Activations::F32,
                    affine: None,
                },
            );
        }
        let blob: Blob = Arc::new(FileMap(map));
        self.maps.push((path.to_path_buf(), blob));
        Ok(())
    }

    /// Makes every 16-bit float weight (bf16, f16) that meets f32 activations meet them
    /// rounded to its own dtype instead ([`Activations::RoundedToWeight`], what llama.cpp's
    /// CPU backend does against such weights); f32 and quantized weights keep their rule.
    pub fn round_activations_to_weight_dtype(&mut self) {
        self.rounds_like_llama_cpp = true;
        self.retarget_f32_activations(&[DType::BF16, DType::F16], Activations::RoundedToWeight);
    }

    /// Makes every bf16 weight that meets f32 activations meet them as three exact bf16
    /// pieces on AMX ([`Activations::Bf16x3`]); other weights keep their rule.
    pub fn split_activations_for_bf16_weights(&mut self) {
        self.retarget_f32_activations(&[DType::BF16], Activations::Bf16x3);
    }

    /// Makes every float weight stored as one of `dtypes` that meets f32 activations meet
    /// them as `act` instead.
    fn retarget_f32_activations(&mut self, dtypes: &[DType], act: Activations) {
        for e in self.entries.values_mut() {
            let stored = matches!(e.dtype, Ok(Storage::Float(d)) if dtypes.contains(&d));
            if stored && e.act == Activations::F32 {
                e.act = act;
            }
        }
    }

    /// How the attention's queries meet the KV cache: under llama.cpp's rounding (a GGUF
    /// file, or 16-bit weights meeting rounded activations) rounded to a bf16 cache's dtype,
    /// as its CPU flash attention does; else in f32, as transformers computes them.
    pub fn attention_queries(&self) -> Queries {
        if self.rounds_like_llama_cpp {
            Queries::RoundedToBf16Cache
        } else {
            Queries::F32
        }
    }

    /// How a pass's keys and values go into the KV cache: under llama.cpp's rounding through
    /// f16 into an f32 cache, which its flash attention casts to f16 before reading; else
    /// rounded to the cache's dtype only.
    pub fn kv_rounding(&self) -> KvRounding {
        if self.rounds_like_llama_cpp {
            KvRounding::F32ThroughF16
        } else {
            KvRounding::CacheDtype
        }
    }

    /// True if a tensor with this exact name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Iterates over all tensor names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Looks up `name` whatever its shape (errors if absent or of an unreadable dtype).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let shape = self
            .entries
            .get(name)
            .map(|e| e.shape.clone())
            .unwrap_or_default();
        self.get(name, &shape)
    }

    /// Looks up `name` and checks its shape; errors name the file, tensor and shapes.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.dir.clone(),
                tensor: name.to_string(),
            })?;
        if e.shape != shape {
            return Err(ModelError::TensorShape {
                path: self.maps[e.blob].0.clone(),
                tensor: name.to_string(),
                expected: shape.to_vec(),
                found: e.shape.clone(),
            });
        }
        self.tensor_of(name, e)
    }

    /// The tensor of entry `e` named `name` (an affine-quantized one with its scales and
    /// biases); errors name the file and the tensor.
    fn tensor_of(&self, name: &str, e: &Entry) -> Result<Tensor> {
        let (file, map) = &self.maps[e.blob];
        let dtype = e.dtype.clone().map_err(|d| ModelError::TensorDtype {
            path: file.clone(),
            tensor: name.to_string(),
            dtype: d,
        })?;
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let affine = match (&e.affine, dtype) {
            (Some(p), Storage::Affine(..)) => Some(Box::new(AffineParts {
                scales: self.tensor_of(&format!("{module}.scales"), &p.scales)?,
                biases: self.tensor_of(&format!("{module}.biases"), &p.biases)?,
            })),
            (None, Storage::Float(_) | Storage::Quant(_)) => None,
            (p, _) => {
                return Err(ModelError::Quantized {
                    path: file.clone(),
                    tensor: name.to_string(),
                    message: format!(
                        "stored as {} {} scales and biases (affine-quantized values have them, \
                         other tensors not)",
                        dtype.name(),
                        if p.is_some() { "with" } else { "without" }
                    ),
                })
            }
        };
        Ok(Tensor {
            map: map.clone(),
            start: e.start,
            end: e.end,
            dtype,
            shape: e.shape.clone(),
            act: e.act,
            name: name.to_string(),
            file: file.clone(),
            affine,
        })
    }
}

/// Unique shard file names from an index's `weight_map`, sorted.
fn shard_files(index: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(index).map_err(|e| ModelError::io(index, e))?;
    parse_shard_index(&bytes, index)
}

/// Parses the bytes of `model.safetensors.index.json` (`index` names it in errors): the
/// unique shard file names of its `weight_map`, sorted. A name must be a plain file name in
/// the model directory.
pub fn parse_shard_index(bytes: &[u8], index: &Path) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| ModelError::Json {
        path: index.to_path_buf(),
        message: e.to_string(),
    })?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::ConfigField {
            path: index.to_path_buf(),
            field: "weight_map".into(),
            expected: "an object mapping tensor names to shard files".into(),
            found: "nothing or another type".into(),
        })?;
    let mut files: Vec<String> = Vec::new();
    for (k, f) in map {
        let f = f.as_str().ok_or_else(|| ModelError::ConfigField {
            path: index.to_path_buf(),
            field: format!("weight_map.{k}"),
            expected: "a file name string".into(),
            found: f.to_string(),
        })?;
        let plain = Path::new(f).file_name().is_some_and(|n| n == f);
        if !plain {
            return Err(ModelError::ConfigField {
                path: index.to_path_buf(),
                field: format!("weight_map.{k}"),
                expected: "a file name in the model directory (no directories, no `..`)".into(),
                found: serde_json::Value::from(f).to_string(),
            });
        }
        if !files.iter().any(|x| x == f) {
            files.push(f.to_string());
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_f16_f32_convert() {
        let mut out = [0.0f32; 2];
        let bf: Vec<u8> = [half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)]
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect();
        to_f32(DType::BF16, &bf, &mut out);
        assert_eq!(out, [1.5, -2.0]);
        let h: Vec<u8> = [half::f16::from_f32(0.25), half::f16::from_f32(3.0)]
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect();
        to_f32(DType::F16, &h, &mut out);
        assert_eq!(out, [0.25, 3.0]);
        let f: Vec<u8> = [7.0f32, -0.5]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        to_f32(DType::F32, &f, &mut out);
        assert_eq!(out, [7.0, -0.5]);
    }

    /// The attention's queries and the KV cache's values follow the checkpoint's rounding
    /// rule: as transformers computes them for a Hugging Face or MLX directory; for a GGUF
    /// file and once activations are rounded to 16-bit weights, as llama.cpp's flash
    /// attention reads the cache (queries rounded to a bf16 cache, an f32 cache through f16).
    #[test]
    fn attention_reads_the_cache_as_llama_cpp_where_activations_round() {
        let path = Path::new("m");
        let llama = (Queries::RoundedToBf16Cache, KvRounding::F32ThroughF16);
        for (conventions, want) in [
            (
                Conventions::HuggingFace,
                (Queries::F32, KvRounding::CacheDtype),
            ),
            (Conventions::Mlx, (Queries::F32, KvRounding::CacheDtype)),
            (Conventions::LlamaCpp, llama),
        ] {
            let mut ws = WeightStore::empty(path, conventions);
            let rule = |ws: &WeightStore| (ws.attention_queries(), ws.kv_rounding());
            assert_eq!(rule(&ws), want, "{conventions:?}");
            ws.round_activations_to_weight_dtype();
            assert_eq!(rule(&ws), llama);
        }
    }
}
