//! The GGUF container (versions 2 and 3, little-endian): metadata key-value pairs and tensor
//! descriptions, checked with the rules of ggml's own reader (`gguf.cpp`) before anything is
//! used, so that what llama.cpp refuses is refused here too. Two differences: arrays of arrays
//! are read (as gguf-py reads them; ggml refuses them), and every string must be UTF-8. Bad
//! input is an error naming the file and what was expected, never a panic; a file cut short
//! says how many bytes are missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::quants::{type_layout, GgmlType};
use crate::model::error::{ModelError, Result};
use crate::model::weights::{Blob, Bytes, FileMap};

/// ggml's limits (`gguf.cpp`, `ggml.h`).
const MAX_STRING_LEN: u64 = 1 << 30;
const MAX_ARRAY_LEN: u64 = 1 << 30;
/// `GGML_MAX_NAME` (64) less the terminating NUL.
const MAX_TENSOR_NAME: usize = 63;
const MAX_DIMS: u32 = 4;
/// ggml refuses nested arrays; gguf-py reads them. We read them, to a bounded depth.
const MAX_ARRAY_DEPTH: usize = 8;
const DEFAULT_ALIGNMENT: u32 = 32;
const ALIGNMENT_KEY: &str = "general.alignment";

/// Smallest possible key-value pair: 8-byte key length, a 1-byte key, 4-byte type, 1-byte value.
const MIN_KV_BYTES: u64 = 14;
/// Smallest possible tensor description: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 24;

/// GGUF value type ids (`gguf_type`).
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STR: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// `bool` (any non-zero byte is true, as in ggml).
    Bool(bool),
    /// `str`, UTF-8.
    Str(String),
    /// Elements of one type (arrays of arrays are read too).
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The GGUF type's name, as ggml spells it (`u32`, `str`, `arr`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F32(_) => "f32",
            GgufValue::F64(_) => "f64",
            GgufValue::Bool(_) => "bool",
            GgufValue::Str(_) => "str",
            GgufValue::Array(_) => "arr",
        }
    }

    /// The value as an unsigned integer, if it is an integer and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f32: an f32, or an f64 an f32 holds exactly.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            GgufValue::F32(v) => Some(v),
            GgufValue::F64(v) if v.is_nan() || v as f32 as f64 == v => Some(v as f32),
            _ => None,
        }
    }

    /// The value as a string slice.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Type and value, shortened, for error messages.
    fn describe(&self) -> String {
        match self {
            GgufValue::U8(v) => format!("u8 {v}"),
            GgufValue::I8(v) => format!("i8 {v}"),
            GgufValue::U16(v) => format!("u16 {v}"),
            GgufValue::I16(v) => format!("i16 {v}"),
            GgufValue::U32(v) => format!("u32 {v}"),
            GgufValue::I32(v) => format!("i32 {v}"),
            GgufValue::U64(v) => format!("u64 {v}"),
            GgufValue::I64(v) => format!("i64 {v}"),
            GgufValue::F32(v) => format!("f32 {v}"),
            GgufValue::F64(v) => format!("f64 {v}"),
            GgufValue::Bool(v) => format!("bool {v}"),
            GgufValue::Str(s) if s.chars().count() > 40 => {
                format!("str {:?}...", s.chars().take(40).collect::<String>())
            }
            GgufValue::Str(s) => format!("str {s:?}"),
            GgufValue::Array(a) => match a.first() {
                Some(v) => format!("an array of {} {} values", a.len(), v.type_name()),
                None => "an empty array".into(),
            },
        }
    }
}

/// One tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    /// Tensor name (at most 63 bytes).
    pub name: String,
    /// Stored type, or the ggml name of a type LSE cannot dequantize (`Q2_K`, `IQ4_XS`, ...).
    pub ty: std::result::Result<GgmlType, String>,
    /// Dimensions, as many as the file gives (0 to 4), in ggml order: `ne[0]` is the
    /// contiguous (innermost) dimension.
    pub ne: Vec<u64>,
    /// First byte of the tensor's data in the file.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
}

impl GgufTensorInfo {
    /// Number of elements (1 for a tensor of no dimensions).
    pub fn n_elements(&self) -> u64 {
        // Cannot overflow: the parser checked the product fits an i64.
        self.ne.iter().product()
    }
}

/// A memory-mapped, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Blob,
    h: Header,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.h.version)
            .field("keys", &self.h.metadata.len())
            .field("tensors", &self.h.tensors.len())
            .finish()
    }
}

/// Everything read from the header.
struct Header {
    version: u32,
    alignment: usize,
    data_offset: usize,
    /// Key-value pairs in file order.
    metadata: Vec<(String, GgufValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps `path` read-only and validates its header and tensor layout.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = std::fs::File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ModelError::MissingFile {
                    path: path.to_path_buf(),
                    what: "GGUF model file".into(),
                }
            } else {
                ModelError::io(path, e)
            }
        })?;
        // SAFETY: the file is opened read-only; LSE never writes model files while they are
        // mapped. Concurrent external modification is outside our contract (as for any mmap).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        let map = FileMap(map);
        let header = parse_header(map.bytes(), path)?;
        Ok(Self::assemble(header, Arc::new(map), path))
    }

    /// Validates GGUF bytes held in memory (copied into an anonymous mapping when valid);
    /// `path` names them in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<GgufFile> {
        let header = parse_header(bytes, path)?;
        let mut anon =
            memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| ModelError::io(path, e))?;
        anon.copy_from_slice(bytes);
        let map = anon.make_read_only().map_err(|e| ModelError::io(path, e))?;
        Ok(Self::assemble(header, Arc::new(map), path))
    }

    fn assemble(h: Header, map: Blob, path: &Path) -> GgufFile {
        GgufFile {
            path: path.to_path_buf(),
            map,
            h,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file's mapping.
    pub fn map(&self) -> &Blob {
        &self.map
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.h.version
    }

    /// Alignment of the tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.h.alignment
    }

    /// Where the tensor data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.h.data_offset
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.h.key_index.get(key).map(|&i| &self.h.metadata[i].1)
    }

    /// The metadata keys in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.h.metadata.iter().map(|(k, _)| k.as_str())
    }

    fn field_error(&self, key: &str, expected: &str) -> ModelError {
        ModelError::ConfigField {
            path: self.path.clone(),
            field: key.to_string(),
            expected: expected.to_string(),
            found: self
                .get(key)
                .map_or_else(|| "nothing".to_string(), GgufValue::describe),
        }
    }

    /// `key` as an unsigned integer: any integer type holding a value ≥ 0.
    pub fn u64_of(&self, key: &str) -> Result<u64> {
        self.get(key)
            .and_then(GgufValue::as_u64)
            .ok_or_else(|| self.field_error(key, "a non-negative integer"))
    }

    /// `key` as an f32: an f32, or an f64 an f32 represents exactly.
    pub fn f32_of(&self, key: &str) -> Result<f32> {
        self.get(key)
            .and_then(GgufValue::as_f32)
            .ok_or_else(|| self.field_error(key, "an f32 (or an f64 exactly representable as f32)"))
    }

    /// `key` as a string.
    pub fn str_of(&self, key: &str) -> Result<&str> {
        self.get(key)
            .and_then(GgufValue::as_str)
            .ok_or_else(|| self.field_error(key, "a string"))
    }

    /// `key` as a bool.
    pub fn bool_of(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            Some(GgufValue::Bool(b)) => Ok(*b),
            _ => Err(self.field_error(key, "a bool")),
        }
    }

    /// `key` as an array.
    pub fn array_of(&self, key: &str) -> Result<&[GgufValue]> {
        match self.get(key) {
            Some(GgufValue::Array(a)) => Ok(a),
            _ => Err(self.field_error(key, "an array")),
        }
    }

    /// The tensors in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.h.tensors
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.h.tensor_index.get(name).map(|&i| &self.h.tensors[i])
    }

    /// The data bytes of `t`, a tensor of this file.
    ///
    /// # Panics
    ///
    /// When `t`'s byte range is outside this file (a description from another file).
    pub fn tensor_bytes(&self, t: &GgufTensorInfo) -> &[u8] {
        &self.map.bytes()[t.start..t.end]
    }
}

fn invalid(path: &Path, message: String) -> ModelError {
    ModelError::Gguf {
        path: path.to_path_buf(),
        message,
    }
}

/// A read position in the file's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn err(&self, message: String) -> ModelError {
        invalid(self.path, message)
    }

    /// `n` bytes, or a truncation error naming `what` and how many bytes are missing.
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let rem = self.remaining();
        if n > rem {
            return Err(self.err(format!(
                "truncated: {} at byte {} needs {n} bytes, the file ends {rem} bytes later \
                 ({} bytes missing)",
                what(),
                self.pos,
                n - rem
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.fixed(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.fixed(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed string's bytes.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let n = self.u64(&|| format!("the length of {}", what()))?;
        if n > MAX_STRING_LEN {
            return Err(self.err(format!(
                "{} is {n} bytes long, more than ggml's limit of {MAX_STRING_LEN}",
                what()
            )));
        }
        self.take(n, what)
    }

    /// A length-prefixed string, which must be UTF-8.
    fn utf8(&mut self, what: &dyn Fn() -> String) -> Result<&'a str> {
        let b = self.string(what)?;
        std::str::from_utf8(b).map_err(|e| {
            self.err(format!(
                "{} is not valid UTF-8 (bad byte at offset {} of {})",
                what(),
                e.valid_up_to(),
                b.len()
            ))
        })
    }

    /// A value of GGUF type `ty`; `what` describes it for errors.
    fn value(&mut self, ty: u32, depth: usize, what: &dyn Fn() -> String) -> Result<GgufValue> {
        Ok(match ty {
            T_U8 => GgufValue::U8(u8::from_le_bytes(self.fixed(what)?)),
            T_I8 => GgufValue::I8(i8::from_le_bytes(self.fixed(what)?)),
            T_U16 => GgufValue::U16(u16::from_le_bytes(self.fixed(what)?)),
            T_I16 => GgufValue::I16(i16::from_le_bytes(self.fixed(what)?)),
            T_U32 => GgufValue::U32(u32::from_le_bytes(self.fixed(what)?)),
            T_I32 => GgufValue::I32(i32::from_le_bytes(self.fixed(what)?)),
            T_F32 => GgufValue::F32(f32::from_le_bytes(self.fixed(what)?)),
            // As ggml: any non-zero byte is true.
            T_BOOL => GgufValue::Bool(self.fixed::<1>(what)?[0] != 0),
            T_STR => GgufValue::Str(self.utf8(what)?.to_string()),
            T_U64 => GgufValue::U64(u64::from_le_bytes(self.fixed(what)?)),
            T_I64 => GgufValue::I64(i64::from_le_bytes(self.fixed(what)?)),
            T_F64 => GgufValue::F64(f64::from_le_bytes(self.fixed(what)?)),
            T_ARRAY => self.array(depth + 1, what)?,
            _ => {
                return Err(self.err(format!(
                    "{} has type id {ty}, which is not a GGUF value type (0 to 12)",
                    what()
                )))
            }
        })
    }

    fn array(&mut self, depth: usize, what: &dyn Fn() -> String) -> Result<GgufValue> {
        let ety = self.u32(&|| format!("the element type of {}", what()))?;
        let n = self.u64(&|| format!("the length of {}", what()))?;
        let min_bytes = match ety {
            T_U8 | T_I8 | T_BOOL => 1,
            T_U16 | T_I16 => 2,
            T_U32 | T_I32 | T_F32 => 4,
            T_U64 | T_I64 | T_F64 | T_STR => 8,
            T_ARRAY => 12,
            _ => {
                return Err(self.err(format!(
                    "{} is an array of type id {ety}, which is not a GGUF value type (0 to 12)",
                    what()
                )))
            }
        };
        if ety == T_ARRAY && depth >= MAX_ARRAY_DEPTH {
            return Err(self.err(format!(
                "{} nests arrays more than {MAX_ARRAY_DEPTH} deep",
                what()
            )));
        }
        if n > MAX_ARRAY_LEN {
            return Err(self.err(format!(
                "{} is an array of {n} elements, more than ggml's limit of {MAX_ARRAY_LEN}",
                what()
            )));
        }
        let need = n * min_bytes;
        if need > self.remaining() {
            return Err(self.err(format!(
                "truncated: {} is an array of {n} elements needing at least {need} bytes at \
                 byte {}, the file ends {} bytes later ({} bytes missing)",
                what(),
                self.pos,
                self.remaining(),
                need - self.remaining()
            )));
        }
        let mut items = Vec::with_capacity(n as usize);
        for i in 0..n {
            items.push(self.value(ety, depth, &|| format!("element {i} of {}", what()))?);
        }
        Ok(GgufValue::Array(items))
    }
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

fn parse_header(bytes: &[u8], path: &Path) -> Result<Header> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        path,
    };
    let magic: [u8; 4] = c.fixed(&|| "the GGUF magic".into())?;
    if &magic != b"GGUF" {
        return Err(c.err(format!(
            "expected the magic `GGUF` at the start, found {:?}: not a GGUF file",
            String::from_utf8_lossy(&magic)
        )));
    }
    let version = c.u32(&|| "the version".into())?;
    let expected = "expected 2 or 3";
    if version == 0 {
        return Err(c.err(format!("version 0 is not a GGUF version ({expected})")));
    }
    if version & 0xFFFF == 0 {
        return Err(c.err(format!(
            "the version reads {version:#010x}, a byte-swapped small number: a big-endian GGUF \
             file? Only little-endian GGUF files are read"
        )));
    }
    if version == 1 {
        return Err(c.err(format!(
            "GGUF version 1 is no longer supported ({expected}; convert the model again with \
             a current llama.cpp)"
        )));
    }
    if version > 3 {
        return Err(c.err(format!(
            "GGUF version {version} is newer than this reader ({expected})"
        )));
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the key-value count".into())?;
    let need = n_tensors
        .checked_mul(MIN_TENSOR_INFO_BYTES)
        .and_then(|t| t.checked_add(n_kv.checked_mul(MIN_KV_BYTES)?));
    if need.is_none_or(|need| need > c.remaining()) {
        return Err(c.err(format!(
            "the header declares {n_tensors} tensors and {n_kv} key-value pairs, more than \
             the {} bytes after it can describe (truncated or corrupt)",
            c.remaining()
        )));
    }

    let mut metadata: Vec<(String, GgufValue)> = Vec::with_capacity(n_kv as usize);
    let mut key_index = HashMap::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = c.utf8(&|| format!("key {i}"))?.to_string();
        if key.is_empty() {
            return Err(c.err(format!("key {i} is empty")));
        }
        if let Some(&j) = key_index.get(&key) {
            return Err(c.err(format!(
                "duplicate key `{key}` (key-value pairs {j} and {i})"
            )));
        }
        let what = || format!("the value of key `{key}`");
        let ty = c.u32(&|| format!("the type of key `{key}`"))?;
        let value = c.value(ty, 0, &what)?;
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    let alignment = match key_index.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(GgufValue::U32(a)) if a.is_power_of_two() => *a,
        Some(v) => {
            return Err(c.err(format!(
                "key `{ALIGNMENT_KEY}`: expected a u32 power of two, found {}",
                v.describe()
            )))
        }
    };

    let mut infos = Vec::with_capacity(n_tensors as usize);
    let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = c.utf8(&|| format!("the name of tensor {i}"))?.to_string();
        if name.len() > MAX_TENSOR_NAME {
            return Err(c.err(format!(
                "tensor {i}: name `{name}` is {} bytes, ggml allows at most {MAX_TENSOR_NAME}",
                name.len()
            )));
        }
        if let Some(&j) = tensor_index.get(&name) {
            return Err(c.err(format!(
                "duplicate tensor name `{name}` (tensors {j} and {i})"
            )));
        }
        let n_dims = c.u32(&|| format!("the dimension count of tensor `{name}`"))?;
        if n_dims > MAX_DIMS {
            return Err(c.err(format!(
                "tensor `{name}`: {n_dims} dimensions, ggml allows at most {MAX_DIMS}"
            )));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for j in 0..n_dims {
            let d = c.u64(&|| format!("dimension {j} of tensor `{name}`"))?;
            if d > i64::MAX as u64 {
                return Err(c.err(format!(
                    "tensor `{name}`: dimension {j} is {} (negative)",
                    d as i64
                )));
            }
            ne.push(d);
        }
        let n_elements = ne
            .iter()
            .try_fold(1i64, |a, &d| a.checked_mul(d as i64))
            .ok_or_else(|| {
                c.err(format!(
                    "tensor `{name}`: shape {ne:?} has more elements than an i64 counts"
                ))
            })? as u64;
        let id = c.u32(&|| format!("the type of tensor `{name}`"))?;
        let layout = type_layout(id).ok_or_else(|| {
            c.err(format!(
                "tensor `{name}`: unknown ggml type id {id} (a newer file than this reader, or \
                 a corrupt one)"
            ))
        })?;
        let Some((block_elems, block_bytes)) = layout.block else {
            return Err(c.err(format!(
                "tensor `{name}`: type {} (id {id}) is no longer supported by ggml",
                layout.name
            )));
        };
        let ne0 = ne.first().copied().unwrap_or(1);
        if !ne0.is_multiple_of(block_elems as u64) {
            return Err(c.err(format!(
                "tensor `{name}`: {ne0} elements per row, not a multiple of {}'s block of \
                 {block_elems}",
                layout.name
            )));
        }
        let n_bytes = (n_elements / block_elems as u64)
            .checked_mul(block_bytes as u64)
            .filter(|&b| usize::try_from(b).is_ok())
            .ok_or_else(|| {
                c.err(format!(
                    "tensor `{name}`: shape {ne:?} of {} is more bytes than memory addresses",
                    layout.name
                ))
            })?;
        let offset = c.u64(&|| format!("the data offset of tensor `{name}`"))?;
        tensor_index.insert(name.clone(), infos.len());
        infos.push((
            GgufTensorInfo {
                name,
                ty: GgmlType::from_id(id),
                ne,
                start: 0,
                end: 0,
            },
            offset,
            n_bytes,
        ));
    }

    // The data section starts at the next multiple of the alignment (when there are tensors);
    // ggml requires each tensor right after the one before, padded to the alignment.
    let len = bytes.len() as u64;
    let align = u64::from(alignment);
    let data_offset = if infos.is_empty() {
        c.pos as u64
    } else {
        // Cannot overflow: c.pos is at most the file length.
        align_up(c.pos as u64, align).unwrap_or(u64::MAX)
    };
    if data_offset > len {
        return Err(c.err(format!(
            "truncated: the tensor data starts at byte {data_offset} (the header padded to \
             {alignment} bytes), the file is {len} bytes ({} bytes missing)",
            data_offset - len
        )));
    }
    let mut expected = 0u64;
    let mut ranges = Vec::with_capacity(infos.len());
    for (i, (info, offset, n_bytes)) in infos.iter().enumerate() {
        let (name, offset, n_bytes) = (info.name.as_str(), *offset, *n_bytes);
        if offset != expected {
            let why = if !offset.is_multiple_of(align) {
                format!("not a multiple of the alignment {alignment}")
            } else if offset < expected {
                format!(
                    "overlapping the tensor before it, `{}`",
                    infos[i - 1].0.name
                )
            } else {
                "leaving a gap".to_string()
            };
            return Err(c.err(format!(
                "tensor `{name}`: data offset {offset}, {why}: ggml expects {expected} \
                 (tensors stored in order, each padded to {alignment} bytes)"
            )));
        }
        let overflow = || {
            c.err(format!(
                "tensor `{name}`: data offset {offset} plus {n_bytes} bytes overflows"
            ))
        };
        let start = data_offset.checked_add(offset).ok_or_else(overflow)?;
        let end = start.checked_add(n_bytes).ok_or_else(overflow)?;
        expected = align_up(n_bytes, align)
            .and_then(|p| expected.checked_add(p))
            .ok_or_else(overflow)?;
        ranges.push((start, end));
    }
    // Tensors are in order, so the last one ends last; report all that is missing.
    if let (Some(&(_, end)), Some((info, _, _))) = (ranges.last(), infos.last()) {
        if end > len {
            return Err(c.err(format!(
                "truncated: tensor `{}` ends at byte {end}, the file is {len} bytes ({} bytes \
                 missing)",
                info.name,
                end - len
            )));
        }
    }
    for ((info, _, _), (start, end)) in infos.iter_mut().zip(ranges) {
        // Both fit: end <= len.
        info.start = start as usize;
        info.end = end as usize;
    }
    Ok(Header {
        version,
        alignment: alignment as usize,
        data_offset: data_offset as usize,
        metadata,
        key_index,
        tensors: infos.into_iter().map(|(t, _, _)| t).collect(),
        tensor_index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds GGUF bytes by hand.
    struct W(Vec<u8>);

    impl W {
        /// Magic, version and counts.
        fn header(version: u32, n_tensors: u64, n_kv: u64) -> W {
            let mut w = W(b"GGUF".to_vec());
            w.u32(version).u64(n_tensors).u64(n_kv);
            w
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.0.extend(v.to_le_bytes());
            self
        }
        fn raw(&mut self, b: &[u8]) -> &mut Self {
            self.0.extend(b);
            self
        }
        fn str(&mut self, s: &str) -> &mut Self {
            self.bytes_str(s.as_bytes())
        }
        fn bytes_str(&mut self, s: &[u8]) -> &mut Self {
            self.u64(s.len() as u64).raw(s)
        }
        /// A key and its type id; the value follows.
        fn key(&mut self, k: &str, ty: u32) -> &mut Self {
            self.str(k).u32(ty)
        }
        fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
            self.key(k, T_U32).u32(v)
        }
        fn kv_str(&mut self, k: &str, v: &str) -> &mut Self {
            self.key(k, T_STR).str(v)
        }
        fn tensor(&mut self, name: &str, ne: &[u64], ty: u32, offset: u64) -> &mut Self {
            self.str(name).u32(ne.len() as u32);
            for &d in ne {
                self.u64(d);
            }
            self.u32(ty).u64(offset)
        }
        fn pad(&mut self, align: usize) -> &mut Self {
            while !self.0.len().is_multiple_of(align) {
                self.0.push(0);
            }
            self
        }
        fn done(&mut self) -> Vec<u8> {
            std::mem::take(&mut self.0)
        }
    }

    const P: &str = "m.gguf";

    fn parse(b: &[u8]) -> Result<GgufFile> {
        GgufFile::from_bytes(b, Path::new(P))
    }

    fn err(b: &[u8]) -> String {
        let e = parse(b).unwrap_err().to_string();
        assert!(e.starts_with("m.gguf: invalid GGUF file: "), "{e}");
        e
    }

    /// The metadata of the good file: every value type, a nested array.
    fn good_kvs(w: &mut W) {
        w.kv_str("general.architecture", "lse-test");
        w.key("u8", T_U8).raw(&[200]);
        w.key("i8", T_I8).raw(&[0xFF]);
        w.key("u16", T_U16).raw(&500u16.to_le_bytes());
        w.key("i16", T_I16).raw(&(-500i16).to_le_bytes());
        w.kv_u32("u32", 7);
        w.key("i32", T_I32).raw(&(-3i32).to_le_bytes());
        w.key("u64", T_U64).u64(1 << 40);
        w.key("i64", T_I64).raw(&12i64.to_le_bytes());
        w.key("f32", T_F32).raw(&1.5f32.to_le_bytes());
        w.key("f64", T_F64).raw(&0.25f64.to_le_bytes());
        w.key("f64_inexact", T_F64).raw(&0.1f64.to_le_bytes());
        w.key("bool", T_BOOL).raw(&[1]);
        w.key("strs", T_ARRAY).u32(T_STR).u64(2).str("a").str("bé");
        w.key("nested", T_ARRAY).u32(T_ARRAY).u64(2);
        w.u32(T_I32).u64(1).raw(&5i32.to_le_bytes());
        w.u32(T_U8).u64(0);
    }
    const GOOD_KVS: u64 = 15;

    /// A valid file: the metadata above, an F32 [4, 2] tensor and a Q8_0 [32] one, with
    /// `align` as general.alignment when given.
    fn good_with(align: Option<u32>) -> Vec<u8> {
        let mut w = W::header(3, 2, GOOD_KVS + align.is_some() as u64);
        good_kvs(&mut w);
        if let Some(a) = align {
            w.kv_u32("general.alignment", a);
        }
        let a = align.unwrap_or(32) as usize;
        w.tensor("t.f32", &[4, 2], 0, 0);
        w.tensor("t.q8", &[32], 8, 32_u64.next_multiple_of(a as u64));
        w.pad(a);
        for i in 0..8 {
            w.raw(&(i as f32).to_le_bytes());
        }
        w.pad(a);
        w.raw(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        w.raw(&(0..32).map(|i| i as u8).collect::<Vec<_>>());
        w.done()
    }

    fn good() -> Vec<u8> {
        good_with(None)
    }

    #[test]
    fn reads_a_good_file() {
        let bytes = good();
        let f = parse(&bytes).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.data_offset() % 32, 0);
        assert_eq!(f.path(), Path::new(P));
        assert_eq!(f.map().bytes().len(), bytes.len());
        assert_eq!(f.keys().count(), GOOD_KVS as usize);
        assert_eq!(f.keys().next(), Some("general.architecture"));
        assert_eq!(f.str_of("general.architecture").unwrap(), "lse-test");
        assert_eq!(f.get("u8"), Some(&GgufValue::U8(200)));
        assert_eq!(f.get("i8"), Some(&GgufValue::I8(-1)));
        assert_eq!(f.get("i16"), Some(&GgufValue::I16(-500)));
        assert_eq!(f.u64_of("u8").unwrap(), 200);
        assert_eq!(f.u64_of("u16").unwrap(), 500);
        assert_eq!(f.u64_of("u32").unwrap(), 7);
        assert_eq!(f.u64_of("u64").unwrap(), 1 << 40);
        assert_eq!(f.u64_of("i64").unwrap(), 12);
        assert_eq!(f.f32_of("f32").unwrap(), 1.5);
        assert_eq!(f.f32_of("f64").unwrap(), 0.25);
        assert!(f.bool_of("bool").unwrap());
        let strs = f.array_of("strs").unwrap();
        assert_eq!(
            strs,
            [GgufValue::Str("a".into()), GgufValue::Str("bé".into())]
        );
        assert_eq!(
            f.get("nested"),
            Some(&GgufValue::Array(vec![
                GgufValue::Array(vec![GgufValue::I32(5)]),
                GgufValue::Array(vec![]),
            ]))
        );

        let t = f.tensors();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name, "t.f32");
        assert_eq!(t[0].ty, Ok(GgmlType::F32));
        assert_eq!(t[0].ne, [4, 2]);
        assert_eq!(t[0].n_elements(), 8);
        assert_eq!((t[0].start, t[0].end - t[0].start), (f.data_offset(), 32));
        let b = f.tensor_bytes(&t[0]);
        assert_eq!(f32::from_le_bytes(b[28..32].try_into().unwrap()), 7.0);
        let q = f.tensor("t.q8").unwrap();
        assert_eq!((q.ty.clone(), q.ne.clone()), (Ok(GgmlType::Q8_0), vec![32]));
        assert_eq!(q.start, f.data_offset() + 32);
        assert_eq!(q.end, bytes.len());
        let mut y = [0f32; 32];
        crate::model::gguf::dequantize_row(GgmlType::Q8_0, f.tensor_bytes(q), &mut y);
        assert_eq!(y[31], 15.5);
        assert!(f.tensor("absent").is_none());
        assert!(f.get("absent").is_none());
    }

    #[test]
    fn custom_alignment_and_version_2() {
        let f = parse(&good_with(Some(64))).unwrap();
        assert_eq!(f.alignment(), 64);
        assert_eq!(f.data_offset() % 64, 0);
        assert_eq!(f.tensors()[1].start, f.data_offset() + 64);
        let mut b = good();
        b[4] = 2;
        assert_eq!(parse(&b).unwrap().version(), 2);
    }

    #[test]
    fn typed_getters_name_the_key_and_what_was_found() {
        let f = parse(&good()).unwrap();
        let e = |r: Result<()>| r.unwrap_err().to_string();
        let m = e(f.u64_of("i32").map(drop));
        assert_eq!(
            m,
            "m.gguf: field `i32`: expected a non-negative integer, found i32 -3"
        );
        let m = e(f.u64_of("missing").map(drop));
        assert!(
            m.contains("field `missing`") && m.ends_with("found nothing"),
            "{m}"
        );
        let m = e(f.f32_of("f64_inexact").map(drop));
        assert!(
            m.contains("exactly representable") && m.contains("f64 0.1"),
            "{m}"
        );
        let m = e(f.str_of("u32").map(drop));
        assert!(m.ends_with("expected a string, found u32 7"), "{m}");
        let m = e(f.bool_of("general.architecture").map(drop));
        assert!(
            m.ends_with("expected a bool, found str \"lse-test\""),
            "{m}"
        );
        let m = e(f.array_of("f32").map(drop));
        assert!(m.ends_with("expected an array, found f32 1.5"), "{m}");
        let m = e(f.u64_of("strs").map(drop));
        assert!(m.ends_with("found an array of 2 str values"), "{m}");
    }

    #[test]
    fn every_truncation_is_an_error_naming_what_is_missing() {
        let b = good();
        for n in 0..b.len() {
            let e = err(&b[..n]);
            assert!(e.contains("truncated"), "prefix {n}: {e}");
        }
        let e = err(&b[..b.len() - 10]);
        assert!(
            e.contains("tensor `t.q8` ends at byte") && e.ends_with("(10 bytes missing)"),
            "{e}"
        );
        let e = err(&b[..3]);
        assert!(e.contains("the GGUF magic at byte 0 needs 4 bytes"), "{e}");
        assert!(e.ends_with("(1 bytes missing)"), "{e}");
    }

    #[test]
    fn corrupt_bytes_never_panic() {
        // Every single-byte change to the header, to a few values.
        let b = good();
        let header_len = parse(&b).unwrap().data_offset();
        for i in 0..header_len {
            for v in [0u8, 1, 0x7F, 0x80, 0xFF] {
                let mut c = b.clone();
                c[i] = v;
                let _ = parse(&c);
            }
        }
    }

    #[test]
    fn header_errors() {
        let e = err(b"GGML\x03\0\0\0");
        assert!(
            e.contains("expected the magic `GGUF`") && e.contains("\"GGML\""),
            "{e}"
        );
        for (v, want) in [
            (0u32, "version 0 is not a GGUF version"),
            (1, "version 1 is no longer supported"),
            (4, "version 4 is newer than this reader (expected 2 or 3)"),
            (0x0300_0000, "big-endian"),
        ] {
            let e = err(&W::header(v, 0, 0).done());
            assert!(e.contains(want), "{v}: {e}");
        }
        let e = err(&W::header(3, 1 << 40, 0).done());
        assert!(e.contains("declares 1099511627776 tensors"), "{e}");
        let e = err(&W::header(3, u64::MAX, u64::MAX).done());
        assert!(e.contains("truncated or corrupt"), "{e}");
        let e = err(&W::header(3, 0, 2).kv_u32("a", 1).done());
        assert!(
            e.contains("declares 0 tensors and 2 key-value pairs"),
            "{e}"
        );
        // An empty, well-formed file.
        let f = parse(&W::header(3, 0, 0).done()).unwrap();
        assert_eq!(
            (f.keys().count(), f.tensors().len(), f.data_offset()),
            (0, 0, 24)
        );
    }

    /// A file of one key-value pair, written by `f`.
    fn one_kv(f: impl FnOnce(&mut W) -> &mut W) -> Vec<u8> {
        let mut w = W::header(3, 0, 1);
        f(&mut w);
        w.done()
    }

    #[test]
    fn metadata_errors() {
        let e = err(&one_kv(|w| w.bytes_str(b"k\xFFey").u32(T_U8).raw(&[0; 8])));
        assert!(e.contains("key 0 is not valid UTF-8"), "{e}");
        let e = err(&one_kv(|w| w.key("name", T_STR).bytes_str(b"ab\xC3")));
        assert!(
            e.contains("the value of key `name` is not valid UTF-8 (bad byte at offset 2 of 3)"),
            "{e}"
        );
        let e = err(&one_kv(|w| {
            w.key("toks", T_ARRAY)
                .u32(T_STR)
                .u64(2)
                .str("ok")
                .bytes_str(b"\x80")
        }));
        assert!(
            e.contains("element 1 of the value of key `toks` is not valid UTF-8"),
            "{e}"
        );
        let e = err(&one_kv(|w| w.str("").u32(T_U32).u32(0).raw(&[0; 8])));
        assert!(e.contains("key 0 is empty"), "{e}");
        let e = err(&W::header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).done());
        assert!(
            e.contains("duplicate key `a` (key-value pairs 0 and 1)"),
            "{e}"
        );
        let e = err(&one_kv(|w| w.key("k", 13).raw(&[0; 8])));
        assert!(
            e.contains("key `k` has type id 13, which is not a GGUF value type"),
            "{e}"
        );
        let e = err(&one_kv(|w| w.key("k", T_ARRAY).u32(99).u64(0)));
        assert!(e.contains("an array of type id 99"), "{e}");
        // A string running past the end of the file.
        let e = err(&one_kv(|w| w.key("k", T_STR).u64(1000).raw(b"abc")));
        assert!(
            e.contains("truncated: the value of key `k` at byte")
                && e.contains("(997 bytes missing)"),
            "{e}"
        );
        let e = err(&one_kv(|w| w.key("k", T_STR).u64(u64::MAX)));
        assert!(e.contains("more than ggml's limit"), "{e}");
        // An array longer than the file could hold.
        let e = err(&one_kv(|w| w.key("k", T_ARRAY).u32(T_U64).u64(1000).u64(1)));
        assert!(
            e.contains("array of 1000 elements") && e.contains("(7992 bytes missing)"),
            "{e}"
        );
        let e = err(&one_kv(|w| w.key("k", T_ARRAY).u32(T_U8).u64(u64::MAX)));
        assert!(e.contains("more than ggml's limit"), "{e}");
        // Arrays nested too deep.
        let e = err(&one_kv(|w| {
            w.key("k", T_ARRAY);
            for _ in 0..20 {
                w.u32(T_ARRAY).u64(1);
            }
            w.u32(T_U8).u64(0)
        }));
        assert!(e.contains("nests arrays more than 8 deep"), "{e}");
        // Bool: any non-zero byte is true, as in ggml.
        let f = parse(&one_kv(|w| w.key("b", T_BOOL).raw(&[2]).raw(&[0; 8]))).unwrap();
        assert!(f.bool_of("b").unwrap());
    }

    #[test]
    fn alignment_errors() {
        for (what, file) in [
            ("u32 48", one_kv(|w| w.kv_u32("general.alignment", 48))),
            ("u32 0", one_kv(|w| w.kv_u32("general.alignment", 0))),
            (
                "u64 32",
                one_kv(|w| w.key("general.alignment", T_U64).u64(32)),
            ),
        ] {
            let e = err(&file);
            let want =
                format!("key `general.alignment`: expected a u32 power of two, found {what}");
            assert!(e.contains(&want), "{e}");
        }
    }

    /// A file with no metadata, the given tensor descriptions and `data` bytes after them.
    fn tensors(n: u64, f: impl FnOnce(&mut W) -> &mut W, data: usize) -> Vec<u8> {
        let mut w = W::header(3, n, 0);
        f(&mut w);
        w.pad(32).raw(&vec![0; data]);
        w.done()
    }

    #[test]
    fn tensor_description_errors() {
        let e = err(&tensors(1, |w| w.tensor(&"x".repeat(64), &[1], 0, 0), 4));
        assert!(
            e.contains("tensor 0: name") && e.contains("is 64 bytes, ggml allows at most 63"),
            "{e}"
        );
        let e = err(&tensors(
            1,
            |w| w.bytes_str(b"\xFF").u32(1).u64(1).u32(0).u64(0),
            4,
        ));
        assert!(e.contains("the name of tensor 0 is not valid UTF-8"), "{e}");
        let e = err(&tensors(
            2,
            |w| w.tensor("a", &[1], 0, 0).tensor("a", &[1], 0, 32),
            36,
        ));
        assert!(
            e.contains("duplicate tensor name `a` (tensors 0 and 1)"),
            "{e}"
        );
        let e = err(&tensors(1, |w| w.tensor("a", &[1, 1, 1, 1, 1], 0, 0), 4));
        assert!(
            e.contains("tensor `a`: 5 dimensions, ggml allows at most 4"),
            "{e}"
        );
        let e = err(&tensors(1, |w| w.tensor("a", &[1, u64::MAX], 0, 0), 4));
        assert!(
            e.contains("tensor `a`: dimension 1 is -1 (negative)"),
            "{e}"
        );
        let e = err(&tensors(1, |w| w.tensor("a", &[1 << 32, 1 << 32], 0, 0), 4));
        assert!(e.contains("has more elements than an i64 counts"), "{e}");
        let e = err(&tensors(1, |w| w.tensor("a", &[1 << 61, 2], 0, 0), 4));
        assert!(e.contains("is more bytes than memory addresses"), "{e}");
        let e = err(&tensors(1, |w| w.tensor("a", &[32], 99, 0), 64));
        assert!(e.contains("tensor `a`: unknown ggml type id 99"), "{e}");
        let e = err(&tensors(1, |w| w.tensor("a", &[32], 4, 0), 64));
        assert!(
            e.contains("type Q4_2 (id 4) is no longer supported by ggml"),
            "{e}"
        );
        let e = err(&tensors(1, |w| w.tensor("a", &[48], 8, 0), 64));
        assert!(
            e.contains("tensor `a`: 48 elements per row, not a multiple of Q8_0's block of 32"),
            "{e}"
        );
        let e = err(&tensors(1, |w| w.tensor("a", &[], 12, 0), 256));
        assert!(
            e.contains("1 elements per row, not a multiple of Q4_K's block of 256"),
            "{e}"
        );
    }

    #[test]
    fn shapes_ggml_allows() {
        // No dimensions: a scalar. A zero dimension: no data.
        let f = parse(&tensors(
            2,
            |w| w.tensor("s", &[], 0, 0).tensor("z", &[8, 0], 1, 32),
            36,
        ))
        .unwrap();
        let (s, z) = (&f.tensors()[0], &f.tensors()[1]);
        assert_eq!((s.ne.len(), s.n_elements(), s.end - s.start), (0, 1, 4));
        assert_eq!(
            (z.n_elements(), z.start, z.end),
            (0, s.start + 32, s.start + 32)
        );
        // A type LSE does not read still parses, with its name.
        let f = parse(&tensors(1, |w| w.tensor("k", &[256, 2], 10, 0), 168)).unwrap();
        assert_eq!(f.tensors()[0].ty, Err("Q2_K".to_string()));
        assert_eq!(f.tensors()[0].end - f.tensors()[0].start, 168);
    }

    #[test]
    fn tensor_layout_errors() {
        // Three 4-byte F32 tensors: ggml expects offsets 0, 32, 64.
        let three = |o: [u64; 3]| {
            tensors(
                3,
                |w| {
                    w.tensor("a", &[1], 0, o[0])
                        .tensor("b", &[1], 0, o[1])
                        .tensor("c", &[1], 0, o[2])
                },
                68,
            )
        };
        assert!(parse(&three([0, 32, 64])).is_ok());
        let e = err(&three([0, 36, 64]));
        assert!(
            e.contains(
                "tensor `b`: data offset 36, not a multiple of the alignment 32: ggml expects 32"
            ),
            "{e}"
        );
        let e = err(&three([0, 0, 64]));
        assert!(
            e.contains("tensor `b`: data offset 0, overlapping the tensor before it, `a`"),
            "{e}"
        );
        let e = err(&three([0, 32, 96]));
        assert!(
            e.contains("tensor `c`: data offset 96, leaving a gap: ggml expects 64"),
            "{e}"
        );
        let e = err(&three([32, 64, 96]));
        assert!(
            e.contains("tensor `a`: data offset 32, leaving a gap: ggml expects 0"),
            "{e}"
        );
        // Out of order.
        let e = err(&three([0, 64, 32]));
        assert!(
            e.contains("tensor `b`: data offset 64, leaving a gap"),
            "{e}"
        );
        // Data cut short: the last tensor says how much is missing in all.
        let b = three([0, 32, 64]);
        let e = err(&b[..b.len() - 50]);
        assert!(
            e.contains("truncated: tensor `c` ends at byte") && e.ends_with("(50 bytes missing)"),
            "{e}"
        );
        // The padding after the tensor descriptions is missing.
        let mut w = W::header(3, 1, 0);
        w.tensor("a", &[1], 0, 0);
        let b = w.done();
        let e = err(&b);
        assert!(
            e.contains("truncated: the tensor data starts at byte 64")
                && e.contains("bytes missing"),
            "{e}"
        );
    }

    #[test]
    fn open_maps_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.gguf");
        std::fs::write(&p, good()).unwrap();
        let f = GgufFile::open(&p).unwrap();
        assert_eq!(f.path(), p);
        assert_eq!(f.tensors().len(), 2);
        let b = good();
        std::fs::write(&p, &b[..b.len() - 1]).unwrap();
        let e = GgufFile::open(&p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: invalid GGUF file: truncated", p.display())),
            "{e}"
        );
        let e = GgufFile::open(&dir.path().join("none.gguf")).unwrap_err();
        assert!(matches!(e, ModelError::MissingFile { .. }), "{e}");
    }
}
