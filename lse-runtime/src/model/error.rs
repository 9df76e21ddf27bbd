//! Typed errors for model loading and prefill.
//!
//! Every variant names the file and the tensor or field involved so a user can fix
//! the input without reading the code.

use std::path::PathBuf;

/// Anything that can go wrong while loading a model directory or running prefill.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A prefill kernel refused its inputs or failed to launch, or a device buffer could not
    /// be made.
    #[error("prefill: {0}")]
    Kernel(#[from] crate::ops::OpError),
    /// The device to load the weights for could not be opened.
    #[error(transparent)]
    Device(#[from] crate::device::DeviceOpenError),
    /// A required file is absent.
    #[error("{path}: missing file ({what})")]
    MissingFile {
        /// The path that was looked for.
        path: PathBuf,
        /// Why the file is needed.
        what: String,
    },
    /// The model path is a file, not a directory.
    #[error(
        "{path} is {what}: --model takes a Hugging Face model directory holding config.json, \
         the *.safetensors weights and tokenizer.json, or a llama.cpp GGUF file (*.gguf)"
    )]
    NotAModelDirectory {
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// An I/O error while opening or mapping a file.
    #[error("{path}: {source}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file could not be parsed.
    #[error("{path}: malformed JSON: {message}")]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// serde_json's message (with line and column).
        message: String,
    },
    /// A config field is missing or has the wrong type or value.
    #[error("{path}: field `{field}`: expected {expected}, found {found}")]
    ConfigField {
        /// The config file.
        path: PathBuf,
        /// Dotted field path, e.g. `text_config.hidden_size`.
        field: String,
        /// What a valid value looks like.
        expected: String,
        /// What the file holds.
        found: String,
    },
    /// config.json's top level is not an object.
    #[error("{path}: expected a JSON object of config fields at the top level, found {found}")]
    ConfigRoot {
        /// The config file.
        path: PathBuf,
        /// What the file holds (its first characters).
        found: String,
    },
    /// `model_type` names an architecture this crate does not implement.
    #[error("{path}: unsupported model_type `{model_type}` (expected one of qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)")]
    UnsupportedModelType {
        /// The config file.
        path: PathBuf,
        /// The value found.
        model_type: String,
    },
    /// A safetensors file has a malformed header.
    #[error("{path}: invalid safetensors file: {message}")]
    Safetensors {
        /// The safetensors file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A GGUF file is malformed (header, metadata or tensor layout).
    #[error("{path}: invalid GGUF file: {message}")]
    Gguf {
        /// The GGUF file.
        path: PathBuf,
        /// What was expected and what the file holds.
        message: String,
    },
    /// A tensor the model needs is not present in any weight file.
    #[error("{path}: missing tensor `{tensor}`")]
    MissingTensor {
        /// The model directory (or index file) searched.
        path: PathBuf,
        /// The full tensor name looked for.
        tensor: String,
    },
    /// A tensor has a shape other than the config implies.
    #[error("{path}: tensor `{tensor}`: expected shape {expected:?}, found {found:?}")]
    TensorShape {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// Shape implied by config.json.
        expected: Vec<usize>,
        /// Shape stored in the file.
        found: Vec<usize>,
    },
    /// A tensor is stored in a dtype we cannot read.
    #[error("{path}: tensor `{tensor}`: unsupported dtype {dtype} (expected BF16, F16 or F32)")]
    TensorDtype {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The stored dtype.
        dtype: String,
    },
    /// A quantized tensor (or its scales and biases) disagrees with its quantization settings.
    #[error("{path}: tensor `{tensor}`: {message}")]
    Quantized {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// What was expected and what the file holds.
        message: String,
    },
    /// Text input was given but the model directory has no usable tokenizer.
    #[error("{path}: {message}")]
    Tokenizer {
        /// The tokenizer file (or the directory searched).
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A caller passed an invalid argument (token id, span length, plan sizes, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A buffer sized from the user's settings is larger than memory allows.
    #[error("out of memory: {what}")]
    OutOfMemory {
        /// What needed how much, and what to change.
        what: String,
    },
    /// A prefill pass does not fit in the session's KV cache.
    #[error("KV cache overflow: session holds {used} tokens, pass adds {adding}, capacity (kv_len) is {capacity}")]
    KvOverflow {
        /// Tokens already in the cache.
        used: usize,
        /// Tokens the pass would add.
        adding: usize,
        /// The cache capacity in tokens.
        capacity: usize,
    },
}

impl From<crate::device::BufError> for ModelError {
    fn from(e: crate::device::BufError) -> Self {
        ModelError::Kernel(e.into())
    }
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, ModelError>;

impl ModelError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ModelError::Io {
            path: path.into(),
            source,
        }
    }
}
