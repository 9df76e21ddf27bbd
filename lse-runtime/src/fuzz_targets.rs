//! Entry points that hand arbitrary bytes to every parser of untrusted input: the
//! KL-divergence base, `config.json`, the token-id JSON, safetensors files, the sharded
//! weights' `model.safetensors.index.json` and GGUF files (container, config, tokenizer). The
//! coverage-guided fuzzers in `fuzz/` and the short mutation runs of the test suite call
//! them. Each must return for any input, without a panic, and checks what a successful
//! parse promises.

use std::path::Path;

use crate::model::config::ModelConfig;
use crate::model::safetensors_file;
use crate::model::weights::parse_shard_index;
use crate::perplexity::parse_token_ids;
use sha2::{Digest, Sha256};

use crate::scoring::kld_base::{self, HEADER_LEN, RECORDS_SHA256_OFFSET};

/// The deterministic generator (xorshift64*) of the test suite's mutation runs, so a failing
/// mutation reproduces from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// One parser's entry point.
pub type Target = fn(&[u8]);

/// The parsers, by name (the fuzz target and corpus folder names).
pub const TARGETS: [(&str, Target); 6] = [
    ("kld_base", kld_base),
    ("config_json", config_json),
    ("token_ids", token_ids),
    ("safetensors", safetensors),
    ("shard_index", shard_index),
    ("gguf", gguf),
];

/// A KL-divergence base file, as given and with its records' checksum rewritten to match
/// (so mutated records reach the checks past the checksum): a file that passes has exactly
/// the size its header implies, and its header re-encodes to its first bytes.
pub fn kld_base(data: &[u8]) {
    let check = |bytes: &[u8]| {
        if let Ok(header) = kld_base::check_bytes(bytes, Path::new("fuzz.kld")) {
            assert_eq!(header.file_len(), Some(bytes.len() as u64));
            assert_eq!(&header.to_bytes()[..], &bytes[..HEADER_LEN]);
        }
    };
    check(data);
    if data.len() >= HEADER_LEN {
        let mut sealed = data.to_vec();
        let digest = Sha256::digest(&data[HEADER_LEN..]);
        sealed[RECORDS_SHA256_OFFSET..HEADER_LEN].copy_from_slice(&digest);
        check(&sealed);
    }
}

/// `config.json`: a config that parses has layer kinds for every layer and consistent
/// derived sizes.
pub fn config_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = ModelConfig::from_json_str(text, Path::new("config.json")) {
        assert_eq!(cfg.layer_types.len(), cfg.num_layers());
        assert!(cfg.rotary_dim() <= cfg.head_dim);
        let _ = cfg.conv_dim();
    }
}

/// The token-id JSON: ids that parse are a non-empty list.
pub fn token_ids(data: &[u8]) {
    if let Ok(ids) = parse_token_ids(data, Path::new("tokens.json")) {
        assert!(!ids.is_empty());
    }
}

/// A safetensors file: every listed tensor's bytes lie inside the file.
pub fn safetensors(data: &[u8]) {
    if let Ok(tensors) = safetensors_file::parse(data, Path::new("model.safetensors")) {
        for t in tensors {
            assert!(t.start <= t.end && t.end <= data.len(), "{t:?}");
        }
    }
}

/// `model.safetensors.index.json`: shard names that parse are plain, unique file names.
pub fn shard_index(data: &[u8]) {
    let index = Path::new("model.safetensors.index.json");
    if let Ok(files) = parse_shard_index(data, index) {
        for (i, f) in files.iter().enumerate() {
            assert_eq!(
                Path::new(f).file_name().and_then(|n| n.to_str()),
                Some(f.as_str())
            );
            assert!(!files[..i].contains(f), "{f} twice");
        }
    }
}

/// A GGUF file: every tensor's bytes lie inside the file; its config, if it parses, has layer
/// kinds for every layer; its tokenizer, if it has one, builds or is refused.
pub fn gguf(data: &[u8]) {
    use crate::model::gguf::{tokenizer, GgufCheckpoint, GgufFile};
    let Ok(f) = GgufFile::from_bytes(data, Path::new("model.gguf")) else {
        return;
    };
    for t in f.tensors() {
        assert!(t.start <= t.end && t.end <= data.len(), "{}", t.name);
        assert_eq!(f.tensor_bytes(t).len(), t.end - t.start);
    }
    if let Ok(cfg) = GgufCheckpoint::config_of(&f) {
        assert_eq!(cfg.layer_types.len(), cfg.num_layers());
    }
    if f.get("tokenizer.ggml.model").is_some() {
        let _ = tokenizer::from_gguf(&f);
    }
}
