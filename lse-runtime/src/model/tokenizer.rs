//! Optional text tokenizer of a model: a directory's `tokenizer.json` via the `tokenizers`
//! crate, or a GGUF file's own ([`super::gguf::tokenizer`]).
//!
//! A BOS token is prepended only when `tokenizer_config.json` sets `add_bos_token: true`
//! (Qwen3.5 does not).
//!
//! A long text is encoded in pieces on all threads (`line_pieces`), cut where a line starts
//! with a printable ASCII character (or a space and one) after a newline: with the byte-level
//! BPE tokenizers of the Qwen family (checked when the tokenizer loads, `cuts_keep_ids`)
//! every such place ends a pre-token, and nothing before it is normalized or matched together
//! with anything after it, so the pieces' ids are the whole text's. Encoding wiki.test.raw
//! (1.3 MB) in one piece took 0.5 to 0.85 s inside `lse perplexity`, a fifth to a third of a
//! one-chunk run's wall time; in pieces on 2 threads 0.24 to 0.32 s against 0.53 to 0.59 s in
//! one (the same binary, 4 runs each).

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tokenizers::models::bpe::BPE;
use tokenizers::{
    DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
};

use super::error::{ModelError, Result};
use super::gguf::tokenizer::PreTokenizer;

/// A loaded tokenizer plus the BOS policy.
pub struct TextTokenizer {
    tok: tokenizers::Tokenizer,
    bos: Option<u32>,
    path: PathBuf,
    /// Whether a text may be encoded in pieces cut at line starts ([`cuts_keep_ids`]).
    cuts: bool,
}

/// The fewest bytes a piece of a text takes: a shorter text is encoded whole.
const PIECE_MIN: usize = 64 * 1024;

/// The split regexes of the Qwen2 and Qwen3.5 tokenizers' `tokenizer.json`.
const QWEN_SPLITS: [&str; 2] = [
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Whether encoding a text in pieces cut by [`line_pieces`] gives the whole text's ids: no
/// truncation or padding; no normalizer or NFC (a newline composes with nothing); a BPE
/// model; the pre-tokenizer a split by one of the Qwen regexes (`tokenizer.json`'s, or the
/// GGUF pre-tokenizers' of [`PreTokenizer`]) and then the byte-level mapping without its own
/// regex; and no added token that holds a line break or takes the whitespace or word around
/// it. In those regexes a newline is matched only at the end of a run of whitespace or line
/// breaks, which stops at a printable character, or before a single space that is followed by
/// one (the space is the next pre-token's, or one of its own).
pub(super) fn cuts_keep_ids(tok: &tokenizers::Tokenizer) -> bool {
    let plain = tok.get_truncation().is_none() && tok.get_padding().is_none();
    let normalizer = matches!(tok.get_normalizer(), None | Some(NormalizerWrapper::NFC(_)));
    let bpe = matches!(tok.get_model(), ModelWrapper::BPE(_));
    let added = tok
        .get_added_tokens_decoder()
        .values()
        .all(|t| !t.content.contains(['\n', '\r']) && !t.lstrip && !t.rstrip && !t.single_word);
    let Some(pre) = tok
        .get_pre_tokenizer()
        .and_then(|p| serde_json::to_value(p).ok())
    else {
        return false;
    };
    let gguf = [PreTokenizer::Qwen35, PreTokenizer::Qwen2].map(PreTokenizer::regex);
    let split = &pre["pretokenizers"][0];
    let bytes = &pre["pretokenizers"][1];
    let regex_ok = split["pattern"]["Regex"]
        .as_str()
        .is_some_and(|r| QWEN_SPLITS.contains(&r) || gguf.iter().any(|g| g == r));
    let pre_ok = pre["type"] == "Sequence"
        && pre["pretokenizers"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
        && split["type"] == "Split"
        && split["behavior"] == "Isolated"
        && split["invert"] == false
        && regex_ok
        && bytes["type"] == "ByteLevel"
        && bytes["add_prefix_space"] == false
        && bytes["use_regex"] == false;
    plain && normalizer && bpe && added && pre_ok
}

/// `text` cut into pieces for [`TextTokenizer::encode`] to encode on `threads` threads: about
/// four per thread, none shorter than [`PIECE_MIN`] but the last, each cut at the first place
/// past its length where a line (after a `\n`) starts with a printable ASCII character, or a
/// space and one. A text with no such place is one piece.
fn line_pieces(text: &str, threads: usize) -> Vec<&str> {
    let size = (text.len() / (4 * threads.max(1))).max(PIECE_MIN);
    let mut pieces = Vec::new();
    let mut start = 0;
    while text.len() - start > size {
        let Some(cut) = line_cut(text.as_bytes(), start + size) else {
            break;
        };
        pieces.push(&text[start..cut]);
        start = cut;
    }
    pieces.push(&text[start..]);
    pieces
}

/// The first offset `p >= from` (and past 0) with `b[p - 1] == b'\n'` where `b[p]` is a printable
/// ASCII character, or a space followed by one.
fn line_cut(b: &[u8], from: usize) -> Option<usize> {
    let mut p = from.max(1);
    while p < b.len() {
        match b[p - 1..].iter().position(|&c| c == b'\n') {
            None => return None,
            Some(i) => p += i,
        }
        // `p - 1` is the newline.
        let printable = |i: usize| b.get(i).is_some_and(u8::is_ascii_graphic);
        if printable(p) || (b.get(p) == Some(&b' ') && printable(p + 1)) {
            return Some(p);
        }
        p += 1;
    }
    None
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` if present (Ok(None) if absent).
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Ok(None);
        }
        let tok = read_tokenizer_json(&path).map_err(|message| ModelError::Tokenizer {
            path: path.clone(),
            message: format!("cannot load tokenizer: {message}"),
        })?;
        let bos = bos_policy(&dir.join("tokenizer_config.json"), &tok)?;
        let cuts = cuts_keep_ids(&tok);
        Ok(Some(TextTokenizer {
            tok,
            bos,
            path,
            cuts,
        }))
    }

    /// The tokenizer a GGUF file carries (`tokenizer.ggml.*`), built to give llama.cpp's ids.
    pub fn from_gguf(f: &super::gguf::GgufFile) -> Result<Self> {
        let (tok, bos) = super::gguf::tokenizer::from_gguf(f)?;
        let cuts = cuts_keep_ids(&tok);
        Ok(TextTokenizer {
            tok,
            bos,
            path: f.path().to_path_buf(),
            cuts,
        })
    }

    /// The BOS id prepended to every encoding, if any.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Encodes `text` to token ids (no special tokens added except the BOS policy), in pieces
    /// on all threads where the tokenizer allows it (the module doc).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let pieces = match self.cuts {
            true => line_pieces(text, rayon::current_num_threads()),
            false => vec![text],
        };
        let encoded: Vec<Result<tokenizers::Encoding>> = pieces
            .par_iter()
            .map(|piece| {
                self.tok
                    .encode(*piece, false)
                    .map_err(|e| ModelError::Tokenizer {
                        path: self.path.clone(),
                        message: format!("cannot encode text: {e}"),
                    })
            })
            .collect();
        let mut ids = Vec::new();
        ids.extend(self.bos);
        for enc in encoded {
            ids.extend_from_slice(enc?.get_ids());
        }
        Ok(ids)
    }
}

/// A tokenizer whose model is known to be BPE when it is read.
type BpeTokenizer = tokenizers::TokenizerImpl<
    BPE,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Reads a `tokenizer.json`, the same tokenizer as `tokenizers::Tokenizer::from_file` gives.
///
/// The crate's loader takes the model's type from the JSON first, so it holds the whole model
/// section twice (as serde's buffered content, then as a `serde_json::Value` tree) before
/// reading it as BPE: 0.55 to 0.70 s for Qwen3.5's 248,044 tokens and 247,587 merges. Read
/// as BPE at once (the same crate code builds the same tokenizer) it takes 0.30 to 0.41 s,
/// and a one-chunk `lse perplexity` run spends 0.2 to 0.3 s less outside its windows. A file
/// whose model is not BPE, or that is not a tokenizer at all, is read again by the crate's
/// loader, whose error names what is wrong.
fn read_tokenizer_json(path: &Path) -> std::result::Result<tokenizers::Tokenizer, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match serde_json::from_str::<BpeTokenizer>(&text) {
        Ok(tok) => Ok(tok.into()),
        Err(_) => text.parse().map_err(|e| format!("{e}")),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::str::FromStr;
    use tokenizers::{AddedToken, Tokenizer, TruncationParams};

    #[test]
    fn a_cut_falls_after_a_newline_before_a_printable_character_or_one_space_and_one() {
        let cut = |s: &str, from| line_cut(s.as_bytes(), from);
        assert_eq!(cut("ab\ncd", 0), Some(3));
        assert_eq!(cut("ab\n cd", 0), Some(3));
        assert_eq!(cut("ab\r\n=x", 0), Some(4));
        assert_eq!(cut("ab\n\ncd", 0), Some(4));
        assert_eq!(cut("ab\ncd\nef", 4), Some(6));
        for none in [
            "ab\n  cd",
            "ab\n\t",
            "ab\n\u{a0}x",
            "ab\n \u{301}",
            "ab\n",
            "abc",
            "\n\n",
        ] {
            assert_eq!(cut(none, 0), None, "{none:?}");
        }
        assert_eq!(cut("ab\ncd", 9), None);
    }

    #[test]
    fn pieces_cover_the_text_in_order_each_at_least_the_piece_size() {
        let line = " = Heading = \n \n Some words, 12 of them.\n";
        let text = line.repeat(20_000);
        for threads in [1, 2, 8] {
            let pieces = line_pieces(&text, threads);
            assert_eq!(pieces.concat(), text);
            let size = (text.len() / (4 * threads)).max(PIECE_MIN);
            assert!(pieces.len() > 1);
            for p in &pieces[..pieces.len() - 1] {
                assert!(p.len() >= size && p.ends_with('\n'), "{} bytes", p.len());
            }
        }
        assert_eq!(line_pieces("short\ntext", 8), ["short\ntext"]);
        let no_lines = "x".repeat(3 * PIECE_MIN);
        assert_eq!(line_pieces(&no_lines, 8), [no_lines.as_str()]);
    }

    /// Text whose line starts hold every case the cut rule weighs: CR LF, blank lines, one and
    /// two spaces, tabs and no-break spaces, combining marks, digits, contractions, punctuation
    /// runs with line breaks, emoji and Hangul jamo that NFC composes.
    fn hostile_text(bytes: usize) -> String {
        const PARTS: [&str; 24] = [
            "\n",
            "\r\n",
            " ",
            "  ",
            "\t",
            "\u{a0}",
            "\u{301}",
            "é",
            "e\u{301}",
            "Hello",
            "'s",
            "'LL",
            "123",
            "=",
            " = ",
            "...\n",
            "\n \n",
            "\u{2028}",
            "😀",
            "\u{1100}",
            "\u{1161}",
            "x",
            "\n ",
            "<|im_start|>",
        ];
        let mut s = String::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        while s.len() < bytes {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.push_str(PARTS[(state >> 33) as usize % PARTS.len()]);
        }
        s
    }

    /// Ids of `pieces` encoded one by one.
    fn piecewise(tok: &Tokenizer, pieces: &[&str]) -> Vec<u32> {
        pieces
            .iter()
            .flat_map(|p| tok.encode(*p, false).unwrap().get_ids().to_vec())
            .collect()
    }

    /// Every place [`line_cut`] finds in `text`.
    fn all_cuts(text: &str) -> Vec<usize> {
        let mut cuts = Vec::new();
        while let Some(p) = line_cut(text.as_bytes(), cuts.last().map_or(0, |&p| p + 1)) {
            cuts.push(p);
        }
        cuts
    }

    /// At every place [`line_cut`] finds in [`hostile_text`], the two sides encoded apart give
    /// the whole text's ids.
    pub(crate) fn assert_every_cut_keeps_ids(tok: &Tokenizer) {
        let text = hostile_text(3000);
        let ids = |s: &str| tok.encode(s, false).unwrap().get_ids().to_vec();
        let whole = ids(&text);
        let cuts = all_cuts(&text);
        assert!(cuts.len() > 50, "{} cuts", cuts.len());
        for p in cuts {
            assert_eq!(
                piecewise(tok, &[&text[..p], &text[p..]]),
                whole,
                "cut at {p}"
            );
        }
    }

    #[test]
    fn a_long_text_encodes_in_pieces_to_the_whole_texts_ids() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/qwen35-tokenizer");
        let t = TextTokenizer::load(&dir)
            .unwrap()
            .expect("tokenizer.json is shipped");
        assert!(t.cuts);
        assert_every_cut_keeps_ids(&t.tok);
        let text = hostile_text(4 * PIECE_MIN);
        let whole = t
            .tok
            .encode(text.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let pieces = line_pieces(&text, 8);
        assert!(pieces.len() > 3, "{} pieces", pieces.len());
        assert_eq!(piecewise(&t.tok, &pieces), whole);
        assert_eq!(t.encode(&text).unwrap(), whole);
    }

    /// A change to a tokenizer's JSON.
    type Edit = dyn FnOnce(&mut serde_json::Value);

    /// A small tokenizer of the Qwen3.5 layout (NFC, the split regex, byte-level, BPE).
    fn small(edit: impl FnOnce(&mut serde_json::Value)) -> Tokenizer {
        Tokenizer::from_str(&small_json(edit).to_string()).unwrap()
    }

    /// The JSON of [`small`].
    fn small_json(edit: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
        let mut json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [{"id": 3, "content": "<|x|>", "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true}],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_SPLITS[1]}, "behavior": "Isolated",
                    "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                    "use_regex": false}]},
            "post_processor": null,
            "decoder": null,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": {"a": 0, "b": 1, "ab": 2, "<|x|>": 3}, "merges": [["a", "b"]]}
        });
        edit(&mut json);
        json
    }

    #[test]
    fn tokenizer_json_reads_as_the_crates_loader_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        let shipped =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/qwen35-tokenizer/tokenizer.json");
        let small_edits: [(&str, Box<Edit>); 5] = [
            ("the Qwen3.5 layout", Box::new(|_| {})),
            (
                "merges as \"a b\" strings",
                Box::new(|j| j["model"]["merges"] = serde_json::json!(["a b"])),
            ),
            (
                "no model type",
                Box::new(|j| {
                    j["model"].as_object_mut().unwrap().remove("type");
                }),
            ),
            (
                "an unknown-token fallback",
                Box::new(|j| {
                    j["model"]["unk_token"] = "<|x|>".into();
                    j["model"]["fuse_unk"] = true.into();
                }),
            ),
            (
                "a word-level model",
                Box::new(|j| {
                    j["model"] = serde_json::json!({"type": "WordLevel",
                        "vocab": {"a": 0, "b": 1, "<|x|>": 3}, "unk_token": "<|x|>"})
                }),
            ),
        ];
        let mut texts = vec![(
            "the shipped tokenizer".to_string(),
            std::fs::read_to_string(&shipped).unwrap(),
        )];
        for (what, edit) in small_edits {
            texts.push((what.to_string(), small_json(edit).to_string()));
        }
        let text = hostile_text(5000);
        for (what, json) in texts {
            std::fs::write(&path, json).unwrap();
            let ours = read_tokenizer_json(&path).unwrap();
            let theirs = Tokenizer::from_file(&path).unwrap();
            assert_eq!(
                ours.to_string(false).unwrap(),
                theirs.to_string(false).unwrap(),
                "{what}"
            );
            let ids = |t: &Tokenizer| t.encode(text.as_str(), false).unwrap().get_ids().to_vec();
            assert_eq!(ids(&ours), ids(&theirs), "{what}");
        }
    }

    #[test]
    fn a_broken_tokenizer_json_is_the_crates_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        let broken = [
            ("not json".to_string(), "expected ident"),
            (
                small_json(|j| j["model"]["merges"] = serde_json::json!([["a", "c"]])).to_string(),
                "Token `c` out of vocabulary",
            ),
            (
                small_json(|j| j["model"]["type"] = "Bigram".into()).to_string(),
                "ModelUntagged",
            ),
            (
                small_json(|j| j["version"] = "9.0".into()).to_string(),
                "9.0",
            ),
        ];
        for (json, needle) in broken {
            std::fs::write(&path, &json).unwrap();
            let ours = read_tokenizer_json(&path).unwrap_err();
            let theirs = Tokenizer::from_file(&path).unwrap_err().to_string();
            assert_eq!(ours, theirs, "{json}");
            assert!(ours.contains(needle), "{ours}");
        }
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(read_tokenizer_json(&path).unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn only_the_qwen_layout_without_stripping_or_line_break_tokens_is_cut() {
        assert!(cuts_keep_ids(&small(|_| {})));
        assert!(cuts_keep_ids(&small(
            |j| j["normalizer"] = serde_json::Value::Null
        )));
        assert!(cuts_keep_ids(&small(|j| {
            j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN_SPLITS[0].into()
        })));
        let refused: [(&str, Box<Edit>); 6] = [
            (
                "lowercasing",
                Box::new(|j| j["normalizer"] = serde_json::json!({"type": "Lowercase"})),
            ),
            (
                "another regex",
                Box::new(|j| {
                    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+".into()
                }),
            ),
            (
                "a prefix space",
                Box::new(|j| {
                    j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true.into()
                }),
            ),
            (
                "a metaspace",
                Box::new(|j| {
                    j["pre_tokenizer"] = serde_json::json!({"type": "Metaspace", "replacement": "▁",
                    "prepend_scheme": "first", "split": true})
                }),
            ),
            (
                "a right-stripping token",
                Box::new(|j| j["added_tokens"][0]["rstrip"] = true.into()),
            ),
            (
                "a token with a line break",
                Box::new(|j| {
                    j["added_tokens"][0]["content"] = "<|\n|>".into();
                    j["model"]["vocab"] = serde_json::json!({"a": 0, "b": 1, "ab": 2, "<|\n|>": 3});
                }),
            ),
        ];
        for (what, edit) in refused {
            assert!(!cuts_keep_ids(&small(edit)), "{what}");
        }
        let mut t = small(|_| {});
        t.with_truncation(Some(TruncationParams::default()))
            .unwrap();
        assert!(!cuts_keep_ids(&t), "truncation");
        let mut t = small(|_| {});
        t.add_tokens(&[AddedToken::from("ba", false).single_word(true)]);
        assert!(!cuts_keep_ids(&t), "a single-word token");
    }
}
