//! Optional text tokenizer of a model: a directory's `tokenizer.json` via the `tokenizers`
//! crate, or a GGUF file's own ([`super::gguf::tokenizer`]).
//!
//! A BOS token is prepended only when `tokenizer_config.json` sets `add_bos_token: true`
//! (Qwen3.5 does not).

use std::path::{Path, PathBuf};

use super::error::{ModelError, Result};

/// A loaded tokenizer plus the BOS policy.
pub struct TextTokenizer {
    tok: tokenizers::Tokenizer,
    bos: Option<u32>,
    path: PathBuf,
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` if present (Ok(None) if absent).
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Ok(None);
        }
        let tok = tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer {
            path: path.clone(),
            message: format!("cannot load tokenizer: {e}"),
        })?;
        let bos = bos_policy(&dir.join("tokenizer_config.json"), &tok)?;
        Ok(Some(TextTokenizer { tok, bos, path }))
    }

    /// The tokenizer a GGUF file carries (`tokenizer.ggml.*`), built to give llama.cpp's ids.
    pub fn from_gguf(f: &super::gguf::GgufFile) -> Result<Self> {
        let (tok, bos) = super::gguf::tokenizer::from_gguf(f)?;
        Ok(TextTokenizer {
            tok,
            bos,
            path: f.path().to_path_buf(),
        })
    }

    /// The BOS id prepended to every encoding, if any.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Encodes `text` to token ids (no special tokens added except the BOS policy).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tok
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer {
                path: self.path.clone(),
                message: format!("cannot encode text: {e}"),
            })?;
        let mut ids = Vec::with_capacity(enc.get_ids().len() + 1);
        ids.extend(self.bos);
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }
}

/// Reads `add_bos_token` / `bos_token` from tokenizer_config.json (absent file: no BOS).
fn bos_policy(cfg: &Path, tok: &tokenizers::Tokenizer) -> Result<Option<u32>> {
    let Ok(text) = std::fs::read_to_string(cfg) else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: cfg.to_path_buf(),
        message: e.to_string(),
    })?;
    if v.get("add_bos_token").and_then(|b| b.as_bool()) != Some(true) {
        return Ok(None);
    }
    let name = match v.get("bos_token") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(o) if o.get("content").and_then(|c| c.as_str()).is_some() => {
            o["content"].as_str().unwrap_or_default().to_string()
        }
        _ => {
            return Err(ModelError::ConfigField {
                path: cfg.to_path_buf(),
                field: "bos_token".into(),
                expected: "a token string (add_bos_token is true)".into(),
                found: v
                    .get("bos_token")
                    .map_or("nothing".into(), |x| x.to_string()),
            })
        }
    };
    tok.token_to_id(&name)
        .map(Some)
        .ok_or_else(|| ModelError::ConfigField {
            path: cfg.to_path_buf(),
            field: "bos_token".into(),
            expected: "a token present in tokenizer.json".into(),
            found: format!("{name:?}"),
        })
}
