//! Short fuzzing in the test suite: every parser of untrusted bytes gets its seed corpus
//! (`fuzz/corpus/<target>`, the regression cases included) and a few thousand deterministic
//! mutations of it, and must never panic. The long coverage-guided runs are
//! `scripts/fuzz.sh` (AFL++); inputs they find go into the corpus and are replayed here.

use std::path::{Path, PathBuf};

use lse_runtime::fuzz_targets::{Rng, TARGETS};
use lse_runtime::model::config::ModelConfig;
use lse_runtime::model::gguf::{GgufCheckpoint, GgufFile};
use lse_runtime::model::safetensors_file;
use lse_runtime::model::weights::parse_shard_index;
use lse_runtime::perplexity::parse_token_ids;
use lse_runtime::scoring::kld_base;

/// Mutations per target: a few seconds in a debug build on a 2-core machine.
const MUTATIONS: usize = 50_000;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// The corpus of `target`, sorted by name, as (name, bytes).
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

/// Values that often sit on parser edges.
const INTERESTING: [&[u8]; 10] = [
    &[0],
    &[0xff],
    &[0x7f],
    &[0x80],
    &[0xff, 0xff, 0xff, 0xff],
    &[0, 0, 0, 0x80],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
    b"-1",
    b"1e400",
    b"\"\xc3\xa9\"",
];

/// One random edit of `input`, sometimes spliced with `other`.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next_u64() as u8;
            }
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                let end = (at + piece.len()).min(v.len());
                v.splice(at..end, piece.iter().copied());
            }
            3 => v.truncate(at),
            4 if at < v.len() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at..end);
            }
            5 => {
                let from = rng.below(other.len() + 1);
                let end = (from + rng.below(64)).min(other.len());
                v.splice(at..at, other[from..end].iter().copied());
            }
            _ => v.insert(at.min(v.len()), rng.next_u64() as u8),
        }
    }
    v
}

#[test]
fn every_parser_survives_mutations_of_its_corpus() {
    for (i, (name, target)) in TARGETS.iter().enumerate() {
        let seeds = corpus(name);
        for (_, bytes) in &seeds {
            target(bytes);
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ i as u64);
        for _ in 0..MUTATIONS {
            let a = &seeds[rng.below(seeds.len())].1;
            let b = &seeds[rng.below(seeds.len())].1;
            let input = mutate(&mut rng, a, b);
            let result = std::panic::catch_unwind(|| target(&input));
            assert!(
                result.is_ok(),
                "{name} panicked on {} bytes: {:?}",
                input.len(),
                String::from_utf8_lossy(&input)
            );
        }
    }
}

fn kld_error(file: &str) -> String {
    let bytes = std::fs::read(corpus_dir("kld_base").join(file)).unwrap();
    kld_base::check_bytes(&bytes, Path::new(file))
        .unwrap_err()
        .to_string()
}

#[test]
fn kld_base_corpus_cases_are_refused_for_what_they_are() {
    let valid = std::fs::read(corpus_dir("kld_base").join("valid.bin")).unwrap();
    let h = kld_base::check_bytes(&valid, Path::new("valid.bin")).unwrap();
    assert_eq!((h.top_k, h.scored_tokens), (2, 3));
    for (file, says) in [
        (
            "negative_nll.bin",
            "record 0 is invalid: NLL -0.5 is negative",
        ),
        ("absurd_nll.bin", "larger than f32 logits can give"),
        ("positive_logprob.bin", "log-prob 0.5 of id 3 is above 0"),
        ("mass_above_one.bin", "probabilities sum to"),
        ("flipped_bit.bin", "the records' SHA-256 is"),
        (
            "version1.bin",
            "format version 1, this build reads version 2",
        ),
        ("truncated.bin", "is truncated"),
        ("duplicate_id.bin", "id 3 appears twice"),
        ("id_outside_vocab.bin", "outside the vocabulary"),
        ("not_base.bin", "not an LSE KL-divergence base file"),
        ("huge_count.bin", "impossibly large"),
    ] {
        let e = kld_error(file);
        assert!(e.contains(file) && e.contains(says), "{file}: {e}");
    }
}

#[test]
fn config_token_and_safetensors_corpus_cases_are_refused_clearly() {
    let config = |file: &str| {
        let text = std::fs::read_to_string(corpus_dir("config_json").join(file)).unwrap();
        ModelConfig::from_json_str(&text, Path::new(file))
    };
    config("big_vocab_bf16.json").unwrap();
    config("moe_fused.json").unwrap();
    let e = config("top_level_array.json").unwrap_err().to_string();
    assert!(
        e.contains("expected a JSON object of config fields at the top level, found [1,2,3]"),
        "{e}"
    );
    assert!(!e.contains("field ``"), "{e}");
    // Without layer_types, the layer list used to be allocated from the count (10^15).
    for file in ["huge_layers.json", "huge_layers_no_types.json"] {
        let e = config(file).unwrap_err().to_string();
        assert!(
            e.contains("num_hidden_layers") && e.contains("at most 4096"),
            "{e}"
        );
    }
    // A multi-byte string quoted in a message is cut at a character, not a byte (this
    // panicked).
    let e = config("multibyte_field.json").unwrap_err().to_string();
    assert!(
        e.contains("field `hidden_size`: expected a positive integer") && e.contains("é..."),
        "{e}"
    );
    let e = config("unicode_value.json").unwrap_err().to_string();
    assert!(e.contains("unsupported model_type"), "{e}");

    let tokens = |file: &str| {
        let bytes = std::fs::read(corpus_dir("token_ids").join(file)).unwrap();
        parse_token_ids(&bytes, Path::new(file))
    };
    assert_eq!(tokens("ids.json").unwrap(), vec![1, 2, 3, 248_319]);
    let e = tokens("empty.json").unwrap_err();
    assert!(
        e.contains("holds no token ids") && !e.contains("too little"),
        "{e}"
    );
    for file in ["negative.json", "big.json", "object.json"] {
        let e = tokens(file).unwrap_err();
        assert!(
            e.contains(file) && e.contains("expected a JSON array"),
            "{e}"
        );
    }

    let weights = |file: &str| {
        let bytes = std::fs::read(corpus_dir("safetensors").join(file)).unwrap();
        safetensors_file::parse(&bytes, Path::new(file))
    };
    assert_eq!(weights("valid.safetensors").unwrap().len(), 3);
    let e = weights("truncated.safetensors").unwrap_err().to_string();
    assert!(
        e.contains("truncated") && e.contains("(10 bytes missing)"),
        "{e}"
    );
    let e = weights("header_cut.safetensors").unwrap_err().to_string();
    assert!(e.contains("truncated: the header is"), "{e}");
    for file in ["shape_mismatch.safetensors", "huge_shape.safetensors"] {
        let e = weights(file).unwrap_err().to_string();
        assert!(
            e.contains(file) && e.contains("invalid safetensors file"),
            "{e}"
        );
    }
}

#[test]
fn shard_index_corpus_cases_are_refused_clearly() {
    let index = |file: &str| {
        let bytes = std::fs::read(corpus_dir("shard_index").join(file)).unwrap();
        parse_shard_index(&bytes, Path::new(file))
    };
    assert_eq!(
        index("valid.json").unwrap(),
        vec![
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    for file in ["parent_dir.json", "absolute.json"] {
        let e = index(file).unwrap_err().to_string();
        assert!(
            e.contains(file)
                && e.contains("field `weight_map.a`: expected a file name in the model directory"),
            "{e}"
        );
    }
    let e = index("not_object.json").unwrap_err().to_string();
    assert!(e.contains("field `weight_map`"), "{e}");
    let e = index("not_string.json").unwrap_err().to_string();
    assert!(
        e.contains("weight_map.a") && e.contains("a file name string"),
        "{e}"
    );
}

/// A GGUF whose `block_count` is 4,278,190,080 (found by AFL++) made the config reader
/// allocate a layer list of that length and abort; it is refused by the bound a config.json's
/// `num_hidden_layers` has.
#[test]
fn gguf_corpus_cases_are_refused_clearly() {
    let read = |file: &str| {
        let bytes = std::fs::read(corpus_dir("gguf").join(file)).unwrap();
        let f = GgufFile::from_bytes(&bytes, Path::new(file)).unwrap();
        GgufCheckpoint::config_of(&f)
    };
    read("qwen35.gguf").unwrap();
    let e = read("huge_block_count.gguf").unwrap_err().to_string();
    assert!(
        e.contains("huge_block_count.gguf")
            && e.contains("qwen35.block_count")
            && e.contains("at most 4096 blocks"),
        "{e}"
    );
}
