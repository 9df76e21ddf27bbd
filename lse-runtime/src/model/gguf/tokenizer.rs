//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`), rebuilt as a `tokenizers::Tokenizer`
//! that gives the token ids llama.cpp gives, so a GGUF model is scored on exactly the tokens
//! `llama-perplexity` scores.
//!
//! Supported: byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the Qwen pre-tokenizers
//! (`tokenizer.ggml.pre = "qwen35"` or `"qwen2"`). llama.cpp splits text with hand-written code
//! over its own Unicode tables (`unicode-data.cpp`, Unicode 15.1); the split regex here is the
//! regex that code implements, with those tables written out as character classes, since
//! Oniguruma's `\p{L}`, `\p{M}`, `\p{N}` follow Unicode 16. As in llama.cpp there is no
//! normalizer (Qwen's `tokenizer.json` has NFC). Control tokens are special added tokens that
//! are *not* matched in text (the tokenizer comes with `encode_special_tokens` set, which is
//! llama-perplexity's `parse_special = false`; clear it to parse them); user-defined tokens are
//! always matched, as in llama.cpp.

use std::path::Path;

use ahash::{AHashMap, AHashSet};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use super::file::{GgufFile, GgufValue};
use crate::model::error::{ModelError, Result};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";

/// llama.cpp's token types (`llama_token_type`) that make a token an added token.
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;

/// A pre-tokenizer (`tokenizer.ggml.pre`) this module implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `qwen35`: llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN35` (letter runs take combining marks).
    Qwen35,
    /// `qwen2`: llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN2`.
    Qwen2,
}

impl PreTokenizer {
    /// The supported `tokenizer.ggml.pre` values.
    pub const NAMES: &'static str = "\"qwen35\" or \"qwen2\"";

    /// The pre-tokenizer a `tokenizer.ggml.pre` value names, if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "qwen35" => Some(PreTokenizer::Qwen35),
            "qwen2" => Some(PreTokenizer::Qwen2),
            _ => None,
        }
    }

    /// The split regex (Oniguruma syntax): llama.cpp's regex for this type, which its
    /// `unicode_regex_split_custom_*` implements, with `\p{L}`, `\p{M}`, `\p{N}` and `\s` as
    /// llama.cpp's tables define them.
    pub fn regex(self) -> String {
        let (l, m, n, ws) = (
            ranges(LETTER),
            ranges(MARK),
            ranges(NUMBER),
            ranges(WHITESPACE),
        );
        let ln = class(&union(&[&l, &n]));
        let lmn = class(&union(&[&l, &m, &n]));
        let (n, ws) = (class(&n), class(&ws));
        let (word, punct) = match self {
            PreTokenizer::Qwen35 => (class(&union(&[&l, &m])), lmn),
            PreTokenizer::Qwen2 => (class(&l), ln.clone()),
        };
        // (?:'s|'t|'re|'ve|'m|'ll|'d) case-insensitively | [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ |
        // \p{N} | ' '?[^\s\p{L}\p{M}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
        format!(
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n{ln}]?[{word}]+|\
             [{n}]| ?[^{ws}{punct}]+[\\r\\n]*|[{ws}]*[\\r\\n]+|[{ws}]+(?![^{ws}])|[{ws}]+"
        )
    }
}

/// The GGUF's own tokenizer as a `tokenizers::Tokenizer` plus the BOS id to prepend (if
/// `tokenizer.ggml.add_bos_token` is true).
///
/// Encoding and then prepending the BOS gives what `common_tokenize(ctx, text, add_special =
/// true, parse_special = false)` gives (the tokenizer has no post-processor). Where llama.cpp
/// would carry on with a malformed vocabulary (an out-of-range or missing `bos_token_id` with
/// `add_bos_token` true, which it replaces by a default; merges naming tokens that do not
/// exist), this refuses the file.
pub fn from_gguf(f: &GgufFile) -> Result<(Tokenizer, Option<u32>)> {
    let path = f.path();
    named(
        f,
        KEY_MODEL,
        "\"gpt2\" (byte-level BPE, the only tokenizer model LSE reads)",
        |s| (s == "gpt2").then_some(()),
    )?;
    let pre = named(
        f,
        KEY_PRE,
        &format!(
            "{} (the pre-tokenizers LSE implements)",
            PreTokenizer::NAMES
        ),
        PreTokenizer::from_name,
    )?;
    let tokens = strings(f, KEY_TOKENS)?;
    let types = match f.get(KEY_TOKEN_TYPE) {
        None => None,
        Some(_) => Some(i32s(f, KEY_TOKEN_TYPE)?),
    };
    let merges = strings(f, KEY_MERGES)?;
    let n_tokens = tokens.len();
    let tok = build(path, pre, tokens, types.as_deref(), &merges)?;
    let add_bos = match f.get(KEY_ADD_BOS) {
        None => false,
        Some(_) => f.bool_of(KEY_ADD_BOS)?,
    };
    let bos_err = |found: String| ModelError::ConfigField {
        path: path.to_path_buf(),
        field: KEY_BOS.to_string(),
        expected: format!(
            "a token id below {n_tokens} (the vocabulary size), since {KEY_ADD_BOS} is true"
        ),
        found,
    };
    let bos = match (add_bos, f.get(KEY_BOS)) {
        (false, _) => None,
        (true, None) => return Err(bos_err("nothing".into())),
        (true, Some(v)) => match v.as_u64() {
            Some(id) if id < n_tokens as u64 => Some(id as u32),
            Some(id) => return Err(bos_err(id.to_string())),
            None => return Err(bos_err(v.type_name().to_string())),
        },
    };
    Ok((tok, bos))
}

/// Builds the tokenizer from the vocabulary (`tokens`, ids in order), the token types
/// (llama.cpp's `llama_token_type` values; `None`: all normal) and the merges (`"a b"`, in rank
/// order). `path` names the file in errors.
pub fn build(
    path: &Path,
    pre: PreTokenizer,
    mut tokens: Vec<String>,
    types: Option<&[i32]>,
    merges: &[String],
) -> Result<Tokenizer> {
    let err = |key: &str, message: String| ModelError::Tokenizer {
        path: path.to_path_buf(),
        message: format!("{key}: {message}"),
    };
    if tokens.is_empty() {
        return Err(err(KEY_TOKENS, "the vocabulary is empty".into()));
    }
    if tokens.len() > i32::MAX as usize {
        return Err(err(
            KEY_TOKENS,
            format!(
                "{} tokens, more than llama.cpp's 32-bit token ids allow",
                tokens.len()
            ),
        ));
    }
    if let Some(types) = types {
        if types.len() != tokens.len() {
            return Err(err(
                KEY_TOKEN_TYPE,
                format!(
                    "{} token types for {} tokens ({KEY_TOKENS}): expected one per token",
                    types.len(),
                    tokens.len()
                ),
            ));
        }
    }
    // llama.cpp renames empty tokens so that they stay distinct.
    for (i, t) in tokens.iter_mut().enumerate() {
        if t.is_empty() {
            *t = format!("[EMPTY_{i}]");
        }
    }
    // aHash, not SipHash, no allocation per merge and the token strings moved into the
    // vocabulary, not copied: with Qwen3.5's 248,044 tokens and 247,587 merges these checks
    // had taken 175 ms of a 400 ms build, and the whole build now takes 150 to 250 ms less.
    let mut ids: AHashMap<&str, u32> = AHashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if let Some(first) = ids.insert(t, i as u32) {
            return Err(err(
                KEY_TOKENS,
                format!("tokens {first} and {i} are both {t:?}: token strings must be unique"),
            ));
        }
    }
    // llama.cpp splits each merge at its first space after the first byte, and keeps the
    // first rank of a pair given twice.
    let mut pairs = Vec::with_capacity(merges.len());
    let mut seen = AHashSet::with_capacity(merges.len());
    let mut merged = String::new();
    for (i, m) in merges.iter().enumerate() {
        let Some(sp) = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
            return Err(err(
                KEY_MERGES,
                format!("merge {i} is {m:?}: expected two tokens separated by a space"),
            ));
        };
        let (a, b) = (&m[..sp], &m[sp + 1..]);
        merged.clear();
        merged.push_str(a);
        merged.push_str(b);
        for part in [a, b, merged.as_str()] {
            if !ids.contains_key(part) {
                return Err(err(
                    KEY_MERGES,
                    format!(
                        "merge {i} ({m:?}) needs the token {part:?}, which is not in {KEY_TOKENS}"
                    ),
                ));
            }
        }
        if seen.insert((a, b)) {
            pairs.push((a.to_string(), b.to_string()));
        }
    }
    drop(ids);
    let (mut special, mut user) = (Vec::new(), Vec::new());
    for (t, &ty) in tokens.iter().zip(types.unwrap_or(&[])) {
        match ty {
            TYPE_CONTROL | TYPE_UNKNOWN => special.push(AddedToken::from(t.clone(), true)),
            TYPE_USER_DEFINED => user.push(AddedToken::from(t.clone(), false).normalized(false)),
            _ => {}
        }
    }
    let vocab: Vocab = tokens.into_iter().zip(0u32..).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .build()
        .map_err(|e| err(KEY_MERGES, format!("cannot build the BPE model: {e}")))?;
    let split = Split::new(
        SplitPattern::Regex(pre.regex()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| err(KEY_PRE, format!("cannot compile the split regex: {e}")))?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        PreTokenizerWrapper::Split(split),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
    ])));
    tok.with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
    tok.add_special_tokens(&special);
    tok.add_tokens(&user);
    tok.set_encode_special_tokens(true);
    Ok(tok)
}

/// The string `key`, as `parse` reads it.
fn named<T>(
    f: &GgufFile,
    key: &str,
    expected: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T> {
    let found = match f.get(key) {
        Some(GgufValue::Str(s)) => match parse(s) {
            Some(t) => return Ok(t),
            None => format!("{s:?}"),
        },
        Some(v) => v.type_name().to_string(),
        None => "nothing".to_string(),
    };
    Err(ModelError::ConfigField {
        path: f.path().to_path_buf(),
        field: key.to_string(),
        expected: expected.to_string(),
        found,
    })
}

/// The strings of the array `key`.
fn strings(f: &GgufFile, key: &str) -> Result<Vec<String>> {
    typed(f, key, "an array of strings", |v| {
        v.as_str().map(str::to_string)
    })
}

/// The i32s of the array `key` (llama.cpp reads token types only as i32).
fn i32s(f: &GgufFile, key: &str) -> Result<Vec<i32>> {
    typed(f, key, "an array of i32", |v| match v {
        GgufValue::I32(x) => Some(*x),
        _ => None,
    })
}

fn typed<T>(
    f: &GgufFile,
    key: &str,
    expected: &str,
    get: impl Fn(&GgufValue) -> Option<T>,
) -> Result<Vec<T>> {
    let wrong = |found: String| ModelError::ConfigField {
        path: f.path().to_path_buf(),
        field: key.to_string(),
        expected: expected.to_string(),
        found,
    };
    let Some(GgufValue::Array(a)) = f.get(key) else {
        return Err(wrong(f.get(key).map_or_else(
            || "nothing".to_string(),
            |v| v.type_name().to_string(),
        )));
    };
    a.iter()
        .enumerate()
        .map(|(i, v)| get(v).ok_or_else(|| wrong(format!("element {i} of type {}", v.type_name()))))
        .collect()
}

/// The ranges of a table below.
fn ranges(table: &str) -> Vec<(u32, u32)> {
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap_or(u32::MAX);
    table
        .split_ascii_whitespace()
        .map(|w| {
            let (a, b) = w.split_once('-').unwrap_or((w, w));
            (hex(a), hex(b))
        })
        .collect()
}

/// The union of sorted range lists, sorted and merged.
fn union(lists: &[&[(u32, u32)]]) -> Vec<(u32, u32)> {
    let mut all: Vec<(u32, u32)> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (a, b) in all {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// A character-class body (without the brackets) matching the ranges.
fn class(ranges: &[(u32, u32)]) -> String {
    let mut s = String::with_capacity(ranges.len() * 16);
    for &(a, b) in ranges {
        if a == b {
            s.push_str(&format!("\\x{{{a:X}}}"));
        } else {
            s.push_str(&format!("\\x{{{a:X}}}-\\x{{{b:X}}}"));
        }
    }
    s
}

// llama.cpp's Unicode classes (`src/unicode-data.cpp`, from UnicodeData.txt of Unicode 15.1):
// \p{L}, \p{M}, \p{N} and what its tokenizer takes for \s, as inclusive hex code point ranges.
// Printed by `tests/goldens/make_gguf_tokenizer_goldens.py --tables`, which checks them too.
const LETTER: &str = "\
41-5A 61-7A AA B5 BA C0-D6 D8-F6 F8-2C1 2C6-2D1 2E0-2E4 2EC 2EE 370-374 376-377 37A-37D \
37F 386 388-38A 38C 38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 559 560-588 5D0-5EA 5EF-5F2 \
620-64A 66E-66F 671-6D3 6D5 6E5-6E6 6EE-6EF 6FA-6FC 6FF 710 712-72F 74D-7A5 7B1 7CA-7EA \
7F4-7F5 7FA 800-815 81A 824 828 840-858 860-86A 870-887 889-88E 8A0-8C9 904-939 93D 950 \
958-961 971-980 985-98C 98F-990 993-9A8 9AA-9B0 9B2 9B6-9B9 9BD 9CE 9DC-9DD 9DF-9E1 \
9F0-9F1 9FC A05-A0A A0F-A10 A13-A28 A2A-A30 A32-A33 A35-A36 A38-A39 A59-A5C A5E A72-A74 \
A85-A8D A8F-A91 A93-AA8 AAA-AB0 AB2-AB3 AB5-AB9 ABD AD0 AE0-AE1 AF9 B05-B0C B0F-B10 \
B13-B28 B2A-B30 B32-B33 B35-B39 B3D B5C-B5D B5F-B61 B71 B83 B85-B8A B8E-B90 B92-B95 \
B99-B9A B9C B9E-B9F BA3-BA4 BA8-BAA BAE-BB9 BD0 C05-C0C C0E-C10 C12-C28 C2A-C39 C3D \
C58-C5A C5D C60-C61 C80 C85-C8C C8E-C90 C92-CA8 CAA-CB3 CB5-CB9 CBD CDD-CDE CE0-CE1 \
CF1-CF2 D04-D0C D0E-D10 D12-D3A D3D D4E D54-D56 D5F-D61 D7A-D7F D85-D96 D9A-DB1 DB3-DBB \
DBD DC0-DC6 E01-E30 E32-E33 E40-E46 E81-E82 E84 E86-E8A E8C-EA3 EA5 EA7-EB0 EB2-EB3 EBD \
EC0-EC4 EC6 EDC-EDF F00 F40-F47 F49-F6C F88-F8C 1000-102A 103F 1050-1055 105A-105D 1061 \
1065-1066 106E-1070 1075-1081 108E 10A0-10C5 10C7 10CD 10D0-10FA 10FC-1248 124A-124D \
1250-1256 1258 125A-125D 1260-1288 128A-128D 1290-12B0 12B2-12B5 12B8-12BE 12C0 12C2-12C5 \
12C8-12D6 12D8-1310 1312-1315 1318-135A 1380-138F 13A0-13F5 13F8-13FD 1401-166C 166F-167F \
1681-169A 16A0-16EA 16F1-16F8 1700-1711 171F-1731 1740-1751 1760-176C 176E-1770 1780-17B3 \
17D7 17DC 1820-1878 1880-1884 1887-18A8 18AA 18B0-18F5 1900-191E 1950-196D 1970-1974 \
1980-19AB 19B0-19C9 1A00-1A16 1A20-1A54 1AA7 1B05-1B33 1B45-1B4C 1B83-1BA0 1BAE-1BAF \
1BBA-1BE5 1C00-1C23 1C4D-1C4F 1C5A-1C7D 1C80-1C88 1C90-1CBA 1CBD-1CBF 1CE9-1CEC 1CEE-1CF3 \
1CF5-1CF6 1CFA 1D00-1DBF 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D \
1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC \
1FF2-1FF4 1FF6-1FFC 2071 207F 2090-209C 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 \
212A-212D 212F-2139 213C-213F 2145-2149 214E 2183-2184 2C00-2CE4 2CEB-2CEE 2CF2-2CF3 \
2D00-2D25 2D27 2D2D 2D30-2D67 2D6F 2D80-2D96 2DA0-2DA6 2DA8-2DAE 2DB0-2DB6 2DB8-2DBE \
2DC0-2DC6 2DC8-2DCE 2DD0-2DD6 2DD8-2DDE 2E2F 3005-3006 3031-3035 303B-303C 3041-3096 \
309D-309F 30A1-30FA 30FC-30FF 3105-312F 3131-318E 31A0-31BF 31F0-31FF 3400-4DBF 4E00-A48C \
A4D0-A4FD A500-A60C A610-A61F A62A-A62B A640-A66E A67F-A69D A6A0-A6E5 A717-A71F A722-A788 \
A78B-A7CA A7D0-A7D1 A7D3 A7D5-A7D9 A7F2-A801 A803-A805 A807-A80A A80C-A822 A840-A873 \
A882-A8B3 A8F2-A8F7 A8FB A8FD-A8FE A90A-A925 A930-A946 A960-A97C A984-A9B2 A9CF A9E0-A9E4 \
A9E6-A9EF A9FA-A9FE AA00-AA28 AA40-AA42 AA44-AA4B AA60-AA76 AA7A AA7E-AAAF AAB1 AAB5-AAB6 \
AAB9-AABD AAC0 AAC2 AADB-AADD AAE0-AAEA AAF2-AAF4 AB01-AB06 AB09-AB0E AB11-AB16 AB20-AB26 \
AB28-AB2E AB30-AB5A AB5C-AB69 AB70-ABE2 AC00-D7A3 D7B0-D7C6 D7CB-D7FB F900-FA6D FA70-FAD9 \
FB00-FB06 FB13-FB17 FB1D FB1F-FB28 FB2A-FB36 FB38-FB3C FB3E FB40-FB41 FB43-FB44 FB46-FBB1 \
FBD3-FD3D FD50-FD8F FD92-FDC7 FDF0-FDFB FE70-FE74 FE76-FEFC FF21-FF3A FF41-FF5A FF66-FFBE \
FFC2-FFC7 FFCA-FFCF FFD2-FFD7 FFDA-FFDC 10000-1000B 1000D-10026 10028-1003A 1003C-1003D \
1003F-1004D 10050-1005D 10080-100FA 10280-1029C 102A0-102D0 10300-1031F 1032D-10340 \
10342-10349 10350-10375 10380-1039D 103A0-103C3 103C8-103CF 10400-1049D 104B0-104D3 \
104D8-104FB 10500-10527 10530-10563 10570-1057A 1057C-1058A 1058C-10592 10594-10595 \
10597-105A1 105A3-105B1 105B3-105B9 105BB-105BC 10600-10736 10740-10755 10760-10767 \
10780-10785 10787-107B0 107B2-107BA 10800-10805 10808 1080A-10835 10837-10838 1083C \
1083F-10855 10860-10876 10880-1089E 108E0-108F2 108F4-108F5 10900-10915 10920-10939 \
10980-109B7 109BE-109BF 10A00 10A10-10A13 10A15-10A17 10A19-10A35 10A60-10A7C 10A80-10A9C \
10AC0-10AC7 10AC9-10AE4 10B00-10B35 10B40-10B55 10B60-10B72 10B80-10B91 10C00-10C48 \
10C80-10CB2 10CC0-10CF2 10D00-10D23 10E80-10EA9 10EB0-10EB1 10F00-10F1C 10F27 10F30-10F45 \
10F70-10F81 10FB0-10FC4 10FE0-10FF6 11003-11037 11071-11072 11075 11083-110AF 110D0-110E8 \
11103-11126 11144 11147 11150-11172 11176 11183-111B2 111C1-111C4 111DA 111DC 11200-11211 \
11213-1122B 1123F-11240 11280-11286 11288 1128A-1128D 1128F-1129D 1129F-112A8 112B0-112DE \
11305-1130C 1130F-11310 11313-11328 1132A-11330 11332-11333 11335-11339 1133D 11350 \
1135D-11361 11400-11434 11447-1144A 1145F-11461 11480-114AF 114C4-114C5 114C7 11580-115AE \
115D8-115DB 11600-1162F 11644 11680-116AA 116B8 11700-1171A 11740-11746 11800-1182B \
118A0-118DF 118FF-11906 11909 1190C-11913 11915-11916 11918-1192F 1193F 11941 119A0-119A7 \
119AA-119D0 119E1 119E3 11A00 11A0B-11A32 11A3A 11A50 11A5C-11A89 11A9D 11AB0-11AF8 \
11C00-11C08 11C0A-11C2E 11C40 11C72-11C8F 11D00-11D06 11D08-11D09 11D0B-11D30 11D46 \
11D60-11D65 11D67-11D68 11D6A-11D89 11D98 11EE0-11EF2 11F02 11F04-11F10 11F12-11F33 11FB0 \
12000-12399 12480-12543 12F90-12FF0 13000-1342F 13441-13446 14400-14646 16800-16A38 \
16A40-16A5E 16A70-16ABE 16AD0-16AED 16B00-16B2F 16B40-16B43 16B63-16B77 16B7D-16B8F \
16E40-16E7F 16F00-16F4A 16F50 16F93-16F9F 16FE0-16FE1 16FE3 17000-187F7 18800-18CD5 \
18D00-18D08 1AFF0-1AFF3 1AFF5-1AFFB 1AFFD-1AFFE 1B000-1B122 1B132 1B150-1B152 1B155 \
1B164-1B167 1B170-1B2FB 1BC00-1BC6A 1BC70-1BC7C 1BC80-1BC88 1BC90-1BC99 1D400-1D454 \
1D456-1D49C 1D49E-1D49F 1D4A2 1D4A5-1D4A6 1D4A9-1D4AC 1D4AE-1D4B9 1D4BB 1D4BD-1D4C3 \
1D4C5-1D505 1D507-1D50A 1D50D-1D514 1D516-1D51C 1D51E-1D539 1D53B-1D53E 1D540-1D544 1D546 \
1D54A-1D550 1D552-1D6A5 1D6A8-1D6C0 1D6C2-1D6DA 1D6DC-1D6FA 1D6FC-1D714 1D716-1D734 \
1D736-1D74E 1D750-1D76E 1D770-1D788 1D78A-1D7A8 1D7AA-1D7C2 1D7C4-1D7CB 1DF00-1DF1E \
1DF25-1DF2A 1E030-1E06D 1E100-1E12C 1E137-1E13D 1E14E 1E290-1E2AD 1E2C0-1E2EB 1E4D0-1E4EB \
1E7E0-1E7E6 1E7E8-1E7EB 1E7ED-1E7EE 1E7F0-1E7FE 1E800-1E8C4 1E900-1E943 1E94B 1EE00-1EE03 \
1EE05-1EE1F 1EE21-1EE22 1EE24 1EE27 1EE29-1EE32 1EE34-1EE37 1EE39 1EE3B 1EE42 1EE47 1EE49 \
1EE4B 1EE4D-1EE4F 1EE51-1EE52 1EE54 1EE57 1EE59 1EE5B 1EE5D 1EE5F 1EE61-1EE62 1EE64 \
1EE67-1EE6A 1EE6C-1EE72 1EE74-1EE77 1EE79-1EE7C 1EE7E 1EE80-1EE89 1EE8B-1EE9B 1EEA1-1EEA3 \
1EEA5-1EEA9 1EEAB-1EEBB 20000-2A6DF 2A700-2B739 2B740-2B81D 2B820-2CEA1 2CEB0-2EBE0 \
2EBF0-2EE5D 2F800-2FA1D 30000-3134A 31350-323AF \
";
const MARK: &str = "\
300-36F 483-489 591-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-65F 670 6D6-6DC 6DF-6E4 \
6E7-6E8 6EA-6ED 711 730-74A 7A6-7B0 7EB-7F3 7FD 816-819 81B-823 825-827 829-82D 859-85B \
898-89F 8CA-8E1 8E3-903 93A-93C 93E-94F 951-957 962-963 981-983 9BC 9BE-9C4 9C7-9C8 \
9CB-9CD 9D7 9E2-9E3 9FE A01-A03 A3C A3E-A42 A47-A48 A4B-A4D A51 A70-A71 A75 A81-A83 ABC \
ABE-AC5 AC7-AC9 ACB-ACD AE2-AE3 AFA-AFF B01-B03 B3C B3E-B44 B47-B48 B4B-B4D B55-B57 \
B62-B63 B82 BBE-BC2 BC6-BC8 BCA-BCD BD7 C00-C04 C3C C3E-C44 C46-C48 C4A-C4D C55-C56 \
C62-C63 C81-C83 CBC CBE-CC4 CC6-CC8 CCA-CCD CD5-CD6 CE2-CE3 CF3 D00-D03 D3B-D3C D3E-D44 \
D46-D48 D4A-D4D D57 D62-D63 D81-D83 DCA DCF-DD4 DD6 DD8-DDF DF2-DF3 E31 E34-E3A E47-E4E \
EB1 EB4-EBC EC8-ECE F18-F19 F35 F37 F39 F3E-F3F F71-F84 F86-F87 F8D-F97 F99-FBC FC6 \
102B-103E 1056-1059 105E-1060 1062-1064 1067-106D 1071-1074 1082-108D 108F 109A-109D \
135D-135F 1712-1715 1732-1734 1752-1753 1772-1773 17B4-17D3 17DD 180B-180D 180F 1885-1886 \
18A9 1920-192B 1930-193B 1A17-1A1B 1A55-1A5E 1A60-1A7C 1A7F 1AB0-1ACE 1B00-1B04 1B34-1B44 \
1B6B-1B73 1B80-1B82 1BA1-1BAD 1BE6-1BF3 1C24-1C37 1CD0-1CD2 1CD4-1CE8 1CED 1CF4 1CF7-1CF9 \
1DC0-1DFF 20D0-20F0 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302F 3099-309A A66F-A672 A674-A67D \
A69E-A69F A6F0-A6F1 A802 A806 A80B A823-A827 A82C A880-A881 A8B4-A8C5 A8E0-A8F1 A8FF \
A926-A92D A947-A953 A980-A983 A9B3-A9C0 A9E5 AA29-AA36 AA43 AA4C-AA4D AA7B-AA7D AAB0 \
AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1 AAEB-AAEF AAF5-AAF6 ABE3-ABEA ABEC-ABED FB1E FE00-FE0F \
FE20-FE2F 101FD 102E0 10376-1037A 10A01-10A03 10A05-10A06 10A0C-10A0F 10A38-10A3A 10A3F \
10AE5-10AE6 10D24-10D27 10EAB-10EAC 10EFD-10EFF 10F46-10F50 10F82-10F85 11000-11002 \
11038-11046 11070 11073-11074 1107F-11082 110B0-110BA 110C2 11100-11102 11127-11134 \
11145-11146 11173 11180-11182 111B3-111C0 111C9-111CC 111CE-111CF 1122C-11237 1123E 11241 \
112DF-112EA 11300-11303 1133B-1133C 1133E-11344 11347-11348 1134B-1134D 11357 11362-11363 \
11366-1136C 11370-11374 11435-11446 1145E 114B0-114C3 115AF-115B5 115B8-115C0 115DC-115DD \
11630-11640 116AB-116B7 1171D-1172B 1182C-1183A 11930-11935 11937-11938 1193B-1193E 11940 \
11942-11943 119D1-119D7 119DA-119E0 119E4 11A01-11A0A 11A33-11A39 11A3B-11A3E 11A47 \
11A51-11A5B 11A8A-11A99 11C2F-11C36 11C38-11C3F 11C92-11CA7 11CA9-11CB6 11D31-11D36 11D3A \
11D3C-11D3D 11D3F-11D45 11D47 11D8A-11D8E 11D90-11D91 11D93-11D97 11EF3-11EF6 11F00-11F01 \
11F03 11F34-11F3A 11F3E-11F42 13440 13447-13455 16AF0-16AF4 16B30-16B36 16F4F 16F51-16F87 \
16F8F-16F92 16FE4 16FF0-16FF1 1BC9D-1BC9E 1CF00-1CF2D 1CF30-1CF46 1D165-1D169 1D16D-1D172 \
1D17B-1D182 1D185-1D18B 1D1AA-1D1AD 1D242-1D244 1DA00-1DA36 1DA3B-1DA6C 1DA75 1DA84 \
1DA9B-1DA9F 1DAA1-1DAAF 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A 1E08F \
1E130-1E136 1E2AE 1E2EC-1E2EF 1E4EC-1E4EF 1E8D0-1E8D6 1E944-1E94A E0100-E01EF \
";
const NUMBER: &str = "\
30-39 B2-B3 B9 BC-BE 660-669 6F0-6F9 7C0-7C9 966-96F 9E6-9EF 9F4-9F9 A66-A6F AE6-AEF \
B66-B6F B72-B77 BE6-BF2 C66-C6F C78-C7E CE6-CEF D58-D5E D66-D78 DE6-DEF E50-E59 ED0-ED9 \
F20-F33 1040-1049 1090-1099 1369-137C 16EE-16F0 17E0-17E9 17F0-17F9 1810-1819 1946-194F \
19D0-19DA 1A80-1A89 1A90-1A99 1B50-1B59 1BB0-1BB9 1C40-1C49 1C50-1C59 2070 2074-2079 \
2080-2089 2150-2182 2185-2189 2460-249B 24EA-24FF 2776-2793 2CFD 3007 3021-3029 3038-303A \
3192-3195 3220-3229 3248-324F 3251-325F 3280-3289 32B1-32BF A620-A629 A6E6-A6EF A830-A835 \
A8D0-A8D9 A900-A909 A9D0-A9D9 A9F0-A9F9 AA50-AA59 ABF0-ABF9 FF10-FF19 10107-10133 \
10140-10178 1018A-1018B 102E1-102FB 10320-10323 10341 1034A 103D1-103D5 104A0-104A9 \
10858-1085F 10879-1087F 108A7-108AF 108FB-108FF 10916-1091B 109BC-109BD 109C0-109CF \
109D2-109FF 10A40-10A48 10A7D-10A7E 10A9D-10A9F 10AEB-10AEF 10B58-10B5F 10B78-10B7F \
10BA9-10BAF 10CFA-10CFF 10D30-10D39 10E60-10E7E 10F1D-10F26 10F51-10F54 10FC5-10FCB \
11052-1106F 110F0-110F9 11136-1113F 111D0-111D9 111E1-111F4 112F0-112F9 11450-11459 \
114D0-114D9 11650-11659 116C0-116C9 11730-1173B 118E0-118F2 11950-11959 11C50-11C6C \
11D50-11D59 11DA0-11DA9 11F50-11F59 11FC0-11FD4 12400-1246E 16A60-16A69 16AC0-16AC9 \
16B50-16B59 16B5B-16B61 16E80-16E96 1D2C0-1D2D3 1D2E0-1D2F3 1D360-1D378 1D7CE-1D7FF \
1E140-1E149 1E2F0-1E2F9 1E4F0-1E4F9 1E8C7-1E8CF 1E950-1E959 1EC71-1ECAB 1ECAD-1ECAF \
1ECB1-1ECB4 1ED01-1ED2D 1ED2F-1ED3D 1F100-1F10C 1FBF0-1FBF9 \
";
const WHITESPACE: &str = "\
9-D 20 85 A0 1680 2000-200A 2028-2029 202F 205F 3000 \
";

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use super::*;

    use super::super::fixture;

    /// GGUF v3 bytes holding `kvs` and no tensors.
    fn gguf_bytes(kvs: &[(String, GgufValue)]) -> Vec<u8> {
        fn ty(v: &GgufValue) -> u32 {
            match v {
                GgufValue::U8(_) => 0,
                GgufValue::I8(_) => 1,
                GgufValue::U16(_) => 2,
                GgufValue::I16(_) => 3,
                GgufValue::U32(_) => 4,
                GgufValue::I32(_) => 5,
                GgufValue::F32(_) => 6,
                GgufValue::Bool(_) => 7,
                GgufValue::Str(_) => 8,
                GgufValue::Array(_) => 9,
                GgufValue::U64(_) => 10,
                GgufValue::I64(_) => 11,
                GgufValue::F64(_) => 12,
            }
        }
        fn str(b: &mut Vec<u8>, s: &str) {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        }
        fn value(b: &mut Vec<u8>, v: &GgufValue) {
            match v {
                GgufValue::U8(x) => b.extend(x.to_le_bytes()),
                GgufValue::I8(x) => b.extend(x.to_le_bytes()),
                GgufValue::U16(x) => b.extend(x.to_le_bytes()),
                GgufValue::I16(x) => b.extend(x.to_le_bytes()),
                GgufValue::U32(x) => b.extend(x.to_le_bytes()),
                GgufValue::I32(x) => b.extend(x.to_le_bytes()),
                GgufValue::U64(x) => b.extend(x.to_le_bytes()),
                GgufValue::I64(x) => b.extend(x.to_le_bytes()),
                GgufValue::F32(x) => b.extend(x.to_le_bytes()),
                GgufValue::F64(x) => b.extend(x.to_le_bytes()),
                GgufValue::Bool(x) => b.push(u8::from(*x)),
                GgufValue::Str(s) => str(b, s),
                GgufValue::Array(a) => {
                    b.extend(a.first().map_or(8, ty).to_le_bytes());
                    b.extend((a.len() as u64).to_le_bytes());
                    for e in a {
                        value(b, e);
                    }
                }
            }
        }
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend((kvs.len() as u64).to_le_bytes());
        for (k, v) in kvs {
            str(&mut b, k);
            b.extend(ty(v).to_le_bytes());
            value(&mut b, v);
        }
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        b
    }

    fn from_kvs(kvs: &[(String, GgufValue)]) -> Result<(Tokenizer, Option<u32>)> {
        let f = GgufFile::from_bytes(&gguf_bytes(kvs), Path::new("t.gguf")).unwrap();
        from_gguf(&f)
    }

    fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
        tok.encode(text, false).unwrap().get_ids().to_vec()
    }

    /// The committed vocabulary's metadata.
    fn qwen35_kvs() -> &'static [(String, GgufValue)] {
        static KVS: OnceLock<Vec<(String, GgufValue)>> = OnceLock::new();
        KVS.get_or_init(|| {
            let f = GgufFile::open(&fixture("qwen35-vocab.gguf")).unwrap();
            f.keys()
                .map(|k| (k.to_string(), f.get(k).unwrap().clone()))
                .collect()
        })
    }

    /// The committed vocabulary as a GGUF made again in memory, with `edit` applied to its
    /// metadata (as the goldens script makes its variants).
    fn variant(edit: impl Fn(&str, &mut GgufValue)) -> Tokenizer {
        let mut kvs = qwen35_kvs().to_vec();
        for (k, v) in &mut kvs {
            edit(k, v);
        }
        let (tok, bos) = from_kvs(&kvs).unwrap();
        assert_eq!(bos, None);
        tok
    }

    /// Every text of the goldens gives llama-tokenize's ids, for the vocabulary as converted,
    /// with `pre = "qwen2"`, and with four tokens user-defined instead of control; with special
    /// parsing off, and on for the text that holds special-token literals.
    #[test]
    fn ids_equal_llama_tokenize() {
        let golden: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture("qwen35-vocab.tokens.json")).unwrap())
                .unwrap();
        let f = GgufFile::open(&fixture("qwen35-vocab.gguf")).unwrap();
        let (qwen35, bos) = from_gguf(&f).unwrap();
        assert_eq!(bos, None, "Qwen3.5 adds no BOS");
        let qwen2 = variant(|k, v| {
            if k == KEY_PRE {
                *v = GgufValue::Str("qwen2".into());
            }
        });
        let user: Vec<&str> = golden["user_defined"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let tokens: Vec<&str> = qwen35_kvs()
            .iter()
            .find(|(k, _)| k == KEY_TOKENS)
            .map(|(_, v)| match v {
                GgufValue::Array(a) => a.iter().map(|t| t.as_str().unwrap()).collect(),
                _ => unreachable!(),
            })
            .unwrap();
        let user_ids: Vec<usize> = user
            .iter()
            .map(|u| tokens.iter().position(|t| t == u).unwrap())
            .collect();
        let user_defined = variant(|k, v| {
            if let (KEY_TOKEN_TYPE, GgufValue::Array(a)) = (k, v) {
                for &i in &user_ids {
                    a[i] = GgufValue::I32(TYPE_USER_DEFINED);
                }
            }
        });
        let cases = golden["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 44);
        for c in cases {
            let mut tok = match c["vocab"].as_str().unwrap() {
                "qwen35" => qwen35.clone(),
                "qwen2" => qwen2.clone(),
                "user_defined" => user_defined.clone(),
                v => panic!("vocab {v}"),
            };
            tok.set_encode_special_tokens(!c["parse_special"].as_bool().unwrap());
            let want: Vec<u32> = c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect();
            let got = encode(&tok, c["text"].as_str().unwrap());
            assert_eq!(
                got, want,
                "{} / {} / parse_special {}",
                c["vocab"], c["name"], c["parse_special"]
            );
        }
        // The round trip back to text.
        let text = cases[0]["text"].as_str().unwrap();
        assert_eq!(qwen35.decode(&encode(&qwen35, text), false).unwrap(), text);
    }

    /// The file's tokenizer, with either pre-tokenizer, may encode a text in pieces cut at line
    /// starts, and every such cut keeps the ids.
    #[test]
    fn line_cuts_keep_the_ids() {
        use crate::model::tokenizer::{cuts_keep_ids, tests::assert_every_cut_keeps_ids};
        for pre in ["qwen35", "qwen2"] {
            let tok = variant(|k, v| {
                if k == KEY_PRE {
                    *v = GgufValue::Str(pre.into());
                }
            });
            assert!(cuts_keep_ids(&tok), "{pre}");
            assert_every_cut_keeps_ids(&tok);
        }
    }

    /// On plain text, the Hugging Face tokenizer.json of Qwen3.5 gives the same ids.
    #[test]
    fn plain_text_ids_equal_tokenizer_json() {
        let hf = Tokenizer::from_file(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../data/qwen35-tokenizer/tokenizer.json"),
        )
        .unwrap();
        let f = GgufFile::open(&fixture("qwen35-vocab.gguf")).unwrap();
        let (tok, _) = from_gguf(&f).unwrap();
        let golden: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture("qwen35-vocab.tokens.json")).unwrap())
                .unwrap();
        let text = golden["cases"][0]["text"].as_str().unwrap();
        assert_eq!(golden["cases"][0]["name"], "wiki_head");
        let ids = encode(&tok, text);
        assert!(ids.len() > 4000);
        assert_eq!(ids, encode(&hf, text));
    }

    /// The Unicode tables parse into sorted, disjoint ranges of valid code points; letters,
    /// marks and numbers do not overlap.
    #[test]
    fn unicode_tables_are_well_formed() {
        let tables = [LETTER, MARK, NUMBER, WHITESPACE].map(ranges);
        for t in &tables {
            assert!(!t.is_empty());
            for &(a, b) in t {
                assert!(a <= b && b < 0x110000, "{a:X}-{b:X}");
            }
            for w in t.windows(2) {
                assert!(w[0].1 + 1 < w[1].0, "{:X?}", w);
            }
        }
        let total: usize = tables[..3].iter().map(|t| t.len()).sum();
        let all = union(&[&tables[0], &tables[1], &tables[2]]);
        let count = |r: &[(u32, u32)]| r.iter().map(|&(a, b)| (b - a + 1) as usize).sum::<usize>();
        assert_eq!(
            count(&all),
            tables[..3].iter().map(|t| count(t)).sum::<usize>()
        );
        assert!(all.len() <= total);
        // Spot checks: 'A', U+0301 (Mn), '7', U+3000; U+1C89 is a letter only from Unicode 16.
        let has = |t: &[(u32, u32)], c: u32| t.iter().any(|&(a, b)| a <= c && c <= b);
        assert!(
            has(&tables[0], 'A' as u32) && has(&tables[1], 0x301) && has(&tables[2], '7' as u32)
        );
        assert!(has(&tables[3], 0x3000) && !has(&tables[3], 0x200B));
        assert!(!has(&all, 0x1C89));
    }

    /// A small well-formed vocabulary: the letters a, b and c, "ab", "Ġ", a control and a
    /// user-defined token.
    fn small_kvs() -> Vec<(String, GgufValue)> {
        let s = |x: &str| GgufValue::Str(x.into());
        let arr = |xs: &[&str]| GgufValue::Array(xs.iter().map(|x| s(x)).collect());
        vec![
            (KEY_MODEL.into(), s("gpt2")),
            (KEY_PRE.into(), s("qwen35")),
            (
                KEY_TOKENS.into(),
                arr(&[
                    "a", "b", "c", "ab", "Ġ", "<|x|>", "<u>", "<", "|", "x", ">", "u",
                ]),
            ),
            (
                KEY_TOKEN_TYPE.into(),
                GgufValue::Array(
                    [1, 1, 1, 1, 1, 3, 4, 1, 1, 1, 1, 1]
                        .map(GgufValue::I32)
                        .to_vec(),
                ),
            ),
            (KEY_MERGES.into(), arr(&["a b"])),
            (KEY_ADD_BOS.into(), GgufValue::Bool(false)),
        ]
    }

    fn with(
        mut kvs: Vec<(String, GgufValue)>,
        key: &str,
        v: Option<GgufValue>,
    ) -> Vec<(String, GgufValue)> {
        kvs.retain(|(k, _)| k != key);
        kvs.extend(v.map(|v| (key.to_string(), v)));
        kvs
    }

    fn err(kvs: &[(String, GgufValue)]) -> String {
        let e = from_kvs(kvs).map(|_| ()).unwrap_err().to_string();
        assert!(e.starts_with("t.gguf: "), "{e}");
        e
    }

    #[test]
    fn small_vocabulary() {
        let (mut tok, bos) = from_kvs(&small_kvs()).unwrap();
        assert_eq!(bos, None);
        assert_eq!(encode(&tok, "ab"), [3]);
        assert_eq!(encode(&tok, "abc ab"), [3, 2, 4, 3]);
        // Control tokens are text unless special parsing is on; user-defined ones always match.
        assert_eq!(encode(&tok, "<|x|><u>"), [7, 8, 9, 8, 10, 6]);
        tok.set_encode_special_tokens(false);
        assert_eq!(encode(&tok, "<|x|><u>"), [5, 6]);

        let kvs = with(small_kvs(), KEY_ADD_BOS, Some(GgufValue::Bool(true)));
        let kvs = with(kvs, KEY_BOS, Some(GgufValue::U32(5)));
        assert_eq!(from_kvs(&kvs).unwrap().1, Some(5));
        // No token types: every token is normal.
        let (mut tok, _) = from_kvs(&with(small_kvs(), KEY_TOKEN_TYPE, None)).unwrap();
        tok.set_encode_special_tokens(false);
        assert_eq!(encode(&tok, "<u>"), [7, 11, 10]);
    }

    #[test]
    fn unsupported_models_and_pre_tokenizers() {
        let s = |x: &str| Some(GgufValue::Str(x.into()));
        let e = err(&with(small_kvs(), KEY_MODEL, s("llama")));
        assert!(
            e.contains("tokenizer.ggml.model") && e.contains("\"gpt2\"") && e.contains("\"llama\""),
            "{e}"
        );
        let e = err(&with(small_kvs(), KEY_MODEL, None));
        assert!(
            e.contains("tokenizer.ggml.model") && e.contains("nothing"),
            "{e}"
        );
        for pre in [s("llama-bpe"), None, Some(GgufValue::U32(1))] {
            let e = err(&with(small_kvs(), KEY_PRE, pre));
            assert!(
                e.contains("tokenizer.ggml.pre") && e.contains("\"qwen35\" or \"qwen2\""),
                "{e}"
            );
        }
    }

    #[test]
    fn malformed_vocabularies() {
        let s = |x: &str| GgufValue::Str(x.into());
        let arr = |xs: &[&str]| Some(GgufValue::Array(xs.iter().map(|x| s(x)).collect()));
        let cases: Vec<(&str, Option<GgufValue>, &[&str])> = vec![
            (
                KEY_TOKENS,
                None,
                &["tokenizer.ggml.tokens", "an array of strings", "nothing"],
            ),
            (
                KEY_TOKENS,
                Some(s("a")),
                &["tokenizer.ggml.tokens", "found str"],
            ),
            (
                KEY_TOKENS,
                Some(GgufValue::Array(vec![GgufValue::U32(7); 12])),
                &["tokenizer.ggml.tokens", "element 0 of type u32"],
            ),
            (KEY_TOKENS, arr(&[]), &["tokenizer.ggml.tokens", "empty"]),
            (
                KEY_TOKENS,
                arr(&[
                    "a", "b", "c", "ab", "Ġ", "<|x|>", "<u>", "<", "|", "x", ">", "a",
                ]),
                &["tokenizer.ggml.tokens", "tokens 0 and 11 are both \"a\""],
            ),
            (
                KEY_TOKEN_TYPE,
                Some(GgufValue::Array(vec![GgufValue::I32(1); 3])),
                &["tokenizer.ggml.token_type", "3 token types for 12 tokens"],
            ),
            (
                KEY_TOKEN_TYPE,
                Some(GgufValue::Array(vec![GgufValue::U32(1); 12])),
                &[
                    "tokenizer.ggml.token_type",
                    "an array of i32",
                    "element 0 of type u32",
                ],
            ),
            (KEY_MERGES, None, &["tokenizer.ggml.merges", "nothing"]),
            (
                KEY_MERGES,
                Some(GgufValue::Array(vec![GgufValue::I8(0)])),
                &["tokenizer.ggml.merges", "element 0 of type i8"],
            ),
            (
                KEY_MERGES,
                arr(&["a b", "ab"]),
                &[
                    "tokenizer.ggml.merges",
                    "merge 1 is \"ab\"",
                    "separated by a space",
                ],
            ),
            (
                KEY_MERGES,
                arr(&["a q"]),
                &[
                    "tokenizer.ggml.merges",
                    "merge 0 (\"a q\")",
                    "\"q\"",
                    "not in tokenizer.ggml.tokens",
                ],
            ),
            (
                KEY_MERGES,
                arr(&["b c"]),
                &["tokenizer.ggml.merges", "needs the token \"bc\""],
            ),
            (
                KEY_ADD_BOS,
                Some(GgufValue::U8(1)),
                &["tokenizer.ggml.add_bos_token", "a bool"],
            ),
        ];
        for (key, v, want) in cases {
            let e = err(&with(small_kvs(), key, v.clone()));
            for w in want {
                assert!(e.contains(w), "{key} = {v:?}: {e:?} lacks {w:?}");
            }
        }
        // BOS requested but missing, out of range or not an integer.
        let bos_on = with(small_kvs(), KEY_ADD_BOS, Some(GgufValue::Bool(true)));
        for (v, found) in [
            (None, "nothing"),
            (Some(GgufValue::U32(12)), "found 12"),
            (Some(GgufValue::I32(-1)), "found i32"),
        ] {
            let e = err(&with(bos_on.clone(), KEY_BOS, v));
            assert!(
                e.contains("tokenizer.ggml.bos_token_id")
                    && e.contains("below 12")
                    && e.contains(found),
                "{e}"
            );
        }
    }

    /// llama.cpp's handling kept: empty tokens are renamed, a merge given twice keeps its
    /// first rank, a merge splits at its first space after the first byte.
    #[test]
    fn llama_cpp_conventions() {
        let s = |x: &str| GgufValue::Str(x.into());
        let arr = |xs: &[&str]| Some(GgufValue::Array(xs.iter().map(|x| s(x)).collect()));
        let tokens = &["a", "b", "c", "ab", "bc", "", "abc"];
        let kvs = with(small_kvs(), KEY_TOKEN_TYPE, None);
        let kvs = with(kvs, KEY_TOKENS, arr(tokens));
        // "b c" outranks "a b"; given again after it, "a b" keeps its first rank.
        let kvs = with(kvs, KEY_MERGES, arr(&["b c", "a b", "ab c", "b c"]));
        let (tok, _) = from_kvs(&kvs).unwrap();
        assert_eq!(tok.id_to_token(5).as_deref(), Some("[EMPTY_5]"));
        assert_eq!(encode(&tok, "abc"), [0, 4]);
        let kvs = with(kvs, KEY_MERGES, arr(&["a b", "b c", "ab c", "b c"]));
        assert_eq!(encode(&from_kvs(&kvs).unwrap().0, "abc"), [6]);
    }
}
