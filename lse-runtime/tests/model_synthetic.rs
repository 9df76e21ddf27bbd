//! Prefill invariance over pass plans, session/KV-cache behaviour, and loading errors, on small
//! random models written by `write_random_model`.

use std::path::Path;
use std::sync::OnceLock;

use lse_runtime::device::{DevSlice, Device, Pool};
use lse_runtime::generator::Generator;
use lse_runtime::model::synthetic::{
    write_random_model, write_safetensors, SyntheticSpec, TensorDecl,
};
use lse_runtime::model::weights::WeightStore;
use lse_runtime::model::{DType, HybridLM, ModelConfig, ModelError, PrefillAttention, Storage};

/// Dense prefill attention on the host device, shared by every test.
fn dense() -> &'static PrefillAttention<'static> {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    static ATTN: OnceLock<PrefillAttention<'static>> = OnceLock::new();
    ATTN.get_or_init(|| {
        PrefillAttention::dense(DEVICE.get_or_init(|| Device::open(Pool::Host).unwrap()))
    })
}

fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + 11) % vocab as u32)
        .collect()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Every plan, from one pass down to ubatch 1, gives the same hidden rows as one pass
/// (up to f32 reassociation).
#[test]
fn hidden_is_independent_of_the_pass_plan() {
    for (name, spec) in [
        ("dense", SyntheticSpec::tiny()),
        ("moe", SyntheticSpec::tiny_moe()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_random_model(dir.path(), &spec, 3).unwrap();
        let model = HybridLM::load(dir.path()).unwrap();
        let t = 150; // crosses the 64-token DeltaNet chunk twice, not a multiple of it
        let toks = tokens(t, spec.vocab_size);
        let reference = Generator::new(&model, dense(), DType::F32, t)
            .unwrap()
            .prefill(&toks, t, t)
            .unwrap();
        assert!(reference.iter().all(|x| x.is_finite()));
        let mut plans: Vec<(usize, usize)> = (1..=t).map(|u| (t, u)).collect();
        plans.extend([(64, 64), (50, 7), (7, 50), (1, 1), (100, 33)]);
        // f32 reassociation noise (chunk boundaries move with the plan) relative to the
        // largest hidden value; observed worst is about 6e-5 of it on these models.
        let scale = reference.iter().fold(1.0f32, |a, x| a.max(x.abs()));
        let tol = 1.5e-4 * scale;
        for (b, u) in plans {
            let h = Generator::new(&model, dense(), DType::F32, t)
                .unwrap()
                .prefill(&toks, b, u)
                .unwrap();
            let d = max_abs(&h, &reference);
            assert!(
                d < tol,
                "{name}: plan batch {b} ubatch {u}: max diff {d} (tol {tol})"
            );
        }
    }
}

/// A pass that keeps only its rows from `from` on (`hidden_rows_on_device`, which skips the
/// other rows past the last layer's mixer) returns those rows of the whole pass bit for bit,
/// and leaves the session as the whole pass does (the next pass gives the same bits): with a
/// last layer of either kind, dense or MoE FFN, keeping every row, some, one or none. A
/// `from` past the pass is an error that changes nothing.
#[test]
fn kept_rows_are_those_of_the_whole_pass_and_the_session_advances_alike() {
    let deltanet_last = SyntheticSpec {
        num_layers: 5,
        ..SyntheticSpec::tiny()
    };
    for (name, spec) in [
        ("attention last", SyntheticSpec::tiny()),
        ("deltanet last", deltanet_last),
        ("moe", SyntheticSpec::tiny_moe()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_random_model(dir.path(), &spec, 7).unwrap();
        let model = HybridLM::load(dir.path()).unwrap();
        let h = model.config().hidden_size;
        let (t, next) = (70, 9);
        let toks = tokens(t + next, spec.vocab_size);
        let mut s = model.new_session(DType::F32, t + next).unwrap();
        let whole = model.hidden(&mut s, &toks[..t], dense()).unwrap();
        let after = model.hidden(&mut s, &toks[t..], dense()).unwrap();
        for from in [0, 1, 37, t - 1, t] {
            let mut s = model.new_session(DType::F32, t + next).unwrap();
            let kept = model
                .hidden_rows_on_device(&mut s, &toks[..t], dense(), from)
                .unwrap()
                .to_vec()
                .unwrap();
            assert!(kept == whole[from * h..], "{name}: rows from {from}");
            let b = model.hidden(&mut s, &toks[t..], dense()).unwrap();
            assert!(b == after, "{name}: the pass after one kept from {from}");
        }
        let mut s = model.new_session(DType::F32, t).unwrap();
        let e = model
            .hidden_rows_on_device(&mut s, &toks[..t], dense(), t + 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rows from 71") && e.contains("70 tokens"),
            "{name}: {e}"
        );
        assert_eq!(s.position(), 0, "{name}");
    }
}

#[test]
fn kv_overflow_is_reported_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SyntheticSpec::tiny();
    write_random_model(dir.path(), &spec, 5).unwrap();
    let model = HybridLM::load(dir.path()).unwrap();
    let toks = tokens(10, spec.vocab_size);
    let full = model
        .hidden(
            &mut model.new_session(DType::F32, 10).unwrap(),
            &toks,
            dense(),
        )
        .unwrap();
    let mut s = model.new_session(DType::F32, 10).unwrap();
    let a = model.hidden(&mut s, &toks[..8], dense()).unwrap();
    let e = model
        .hidden(&mut s, &toks[..5], dense())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("KV cache overflow")
            && e.contains("holds 8")
            && e.contains("capacity (kv_len) is 10"),
        "{e}"
    );
    assert_eq!(s.position(), 8);
    // The failed call changed nothing: the session continues exactly.
    let b = model.hidden(&mut s, &toks[8..], dense()).unwrap();
    let h = model.config().hidden_size;
    assert!(max_abs(&a, &full[..8 * h]) < 1e-5);
    assert!(max_abs(&b, &full[8 * h..]) < 1e-4);
    // Generator checks the whole prompt up front.
    let mut g = Generator::new(&model, dense(), DType::BF16, 4).unwrap();
    let e = g.prefill(&toks, 2, 2).unwrap_err().to_string();
    assert!(e.contains("KV cache overflow"), "{e}");
    assert_eq!(g.session().position(), 0);
}

#[test]
fn bad_token_and_foreign_session_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SyntheticSpec::tiny();
    write_random_model(dir.path(), &spec, 5).unwrap();
    let model = HybridLM::load(dir.path()).unwrap();
    let mut s = model.new_session(DType::BF16, 8).unwrap();
    let e = model
        .hidden(&mut s, &[1, 96, 2], dense())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token id 96 at index 1") && e.contains("vocab_size 96"),
        "{e}"
    );
    assert_eq!(s.position(), 0);
    let other = tempfile::tempdir().unwrap();
    write_random_model(
        other.path(),
        &SyntheticSpec {
            num_layers: 8,
            ..spec
        },
        5,
    )
    .unwrap();
    let big = HybridLM::load(other.path()).unwrap();
    let e = model
        .hidden(&mut big.new_session(DType::F32, 8).unwrap(), &[1], dense())
        .unwrap_err()
        .to_string();
    assert!(e.contains("session layout"), "{e}");
    let e = model.new_session(DType::F32, 0).err().unwrap().to_string();
    assert!(e.contains("kv_len"), "{e}");
}

#[test]
fn bf16_kv_cache_stays_close_to_f32() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SyntheticSpec::tiny();
    write_random_model(dir.path(), &spec, 9).unwrap();
    let model = HybridLM::load(dir.path()).unwrap();
    let toks = tokens(100, spec.vocab_size);
    let f32h = model
        .hidden(
            &mut model.new_session(DType::F32, 100).unwrap(),
            &toks,
            dense(),
        )
        .unwrap();
    let mut diffs = Vec::new();
    for dt in [DType::BF16, DType::F16] {
        let h = model
            .hidden(&mut model.new_session(dt, 100).unwrap(), &toks, dense())
            .unwrap();
        diffs.push(max_abs(&h, &f32h));
    }
    // Rounding K/V must show (caches really store the dtype) but stay small.
    assert!(diffs[0] > 0.0 && diffs[0] < 5e-2, "bf16 {diffs:?}");
    assert!(
        diffs[1] < diffs[0],
        "f16 should be closer than bf16: {diffs:?}"
    );
}

#[test]
fn random_models_are_deterministic_and_tied_heads_share_the_embedding() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let spec = SyntheticSpec::tiny_moe();
    write_random_model(a.path(), &spec, 1).unwrap();
    write_random_model(b.path(), &spec, 1).unwrap();
    write_random_model(c.path(), &spec, 2).unwrap();
    let read = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert_eq!(read(a.path()), read(b.path()));
    assert_ne!(read(a.path()), read(c.path()));
    let m = HybridLM::load(a.path()).unwrap();
    let ws = WeightStore::open(a.path()).unwrap();
    let emb = ws.tensor("model.embed_tokens.weight").unwrap();
    assert!(m.config().tie_word_embeddings);
    assert_eq!(m.lm_head().bytes, emb.bytes());
    assert_eq!(m.lm_head().dtype, Storage::Float(DType::BF16));
    // Untied: the head is lm_head.weight.
    let d = tempfile::tempdir().unwrap();
    write_random_model(d.path(), &SyntheticSpec::tiny(), 1).unwrap();
    let m = HybridLM::load(d.path()).unwrap();
    let ws = WeightStore::open(d.path()).unwrap();
    assert_eq!(
        m.lm_head().bytes,
        ws.tensor("lm_head.weight").unwrap().bytes()
    );
    let h = m
        .hidden(
            &mut m.new_session(DType::F32, 3).unwrap(),
            &[1, 2, 3],
            dense(),
        )
        .unwrap();
    assert_eq!(m.logits_reference(&h, 3).len(), 3 * 96);
}

/// The config a spec writes, as the loader reads it, and its number of full-attention layers.
fn spec_config(s: &SyntheticSpec) -> (ModelConfig, usize) {
    let c =
        ModelConfig::from_json_str(&s.config_json().to_string(), Path::new("config.json")).unwrap();
    let full = c
        .layer_types
        .iter()
        .filter(|k| **k == lse_runtime::model::LayerKind::Full)
        .count();
    (c, full)
}

#[test]
fn qwen35_0_8b_spec_has_the_real_shape() {
    let (c, full) = spec_config(&SyntheticSpec::qwen35_0_8b());
    assert_eq!((c.num_layers(), full), (24, 6));
    assert_eq!(
        (c.hidden_size, c.vocab_size, c.conv_dim()),
        (1024, 248_320, 6144)
    );
    assert_eq!((c.rotary_dim(), c.intermediate_size), (64, 3584));
    assert!(c.tie_word_embeddings);
}

#[test]
fn qwen35_35b_a3b_4l_spec_has_the_moe_shape() {
    let (c, full) = spec_config(&SyntheticSpec::qwen35_35b_a3b_4l());
    assert_eq!((c.num_layers(), full), (4, 1));
    assert_eq!((c.hidden_size, c.vocab_size), (2048, 248_320));
    let moe = c.moe.as_ref().unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.num_experts_per_tok,
            moe.moe_intermediate_size
        ),
        (256, 8, 512)
    );
    assert!(!c.tie_word_embeddings);
}

/// Copies a model's tensors into `dst`, transforming (name, shape) or dropping tensors.
fn rewrite(src: &Path, dst: &Path, f: impl Fn(&str, &[usize]) -> Option<(String, Vec<usize>)>) {
    std::fs::create_dir_all(dst).unwrap();
    std::fs::copy(src.join("config.json"), dst.join("config.json")).unwrap();
    let ws = WeightStore::open(src).unwrap();
    let mut names: Vec<String> = ws.names().map(str::to_string).collect();
    names.sort();
    let mut decls = Vec::new();
    let mut data = Vec::new();
    for n in names {
        let t = ws.tensor(&n).unwrap();
        if let Some((name, shape)) = f(&n, &t.shape) {
            let Storage::Float(dtype) = t.dtype else {
                panic!("{n}: a synthetic checkpoint holds float tensors only");
            };
            data.push(t.to_f32_vec());
            decls.push(TensorDecl { name, dtype, shape });
        }
    }
    write_safetensors(&dst.join("model.safetensors"), &decls, |i, s, out| {
        out.copy_from_slice(&data[i][s..s + out.len()])
    })
    .unwrap();
}

fn load_err(dir: &Path) -> String {
    match HybridLM::load(dir) {
        Ok(_) => panic!("{} loaded but should not", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn loading_errors_name_the_file_and_the_problem() {
    let root = tempfile::tempdir().unwrap();
    let good = root.path().join("good");
    write_random_model(&good, &SyntheticSpec::tiny(), 4).unwrap();

    let e = load_err(&root.path().join("nope"));
    assert!(
        e.contains("nope")
            && e.contains("missing file (model: a Hugging Face model directory or a GGUF file)"),
        "{e}"
    );

    let no_cfg = root.path().join("no_cfg");
    std::fs::create_dir_all(&no_cfg).unwrap();
    let e = load_err(&no_cfg);
    assert!(e.contains("config.json: missing file"), "{e}");

    let no_w = root.path().join("no_weights");
    std::fs::create_dir_all(&no_w).unwrap();
    std::fs::copy(good.join("config.json"), no_w.join("config.json")).unwrap();
    let e = load_err(&no_w);
    assert!(e.contains("model.safetensors: missing file"), "{e}");

    let bad_json = root.path().join("bad_json");
    std::fs::create_dir_all(&bad_json).unwrap();
    std::fs::write(bad_json.join("config.json"), "{\"model_type\": ").unwrap();
    let e = load_err(&bad_json);
    assert!(
        e.contains("config.json: malformed JSON") && e.contains("EOF"),
        "{e}"
    );

    let llama = root.path().join("llama");
    std::fs::create_dir_all(&llama).unwrap();
    std::fs::write(llama.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    assert!(load_err(&llama).contains("unsupported model_type `llama`"));

    let missing = root.path().join("missing_tensor");
    rewrite(&good, &missing, |n, s| {
        (!n.ends_with("layers.1.linear_attn.in_proj_z.weight")).then(|| (n.into(), s.to_vec()))
    });
    let e = load_err(&missing);
    assert!(
        e.contains("missing tensor `model.layers.1.linear_attn.in_proj_z.weight`"),
        "{e}"
    );

    let shaped = root.path().join("misshapen");
    rewrite(&good, &shaped, |n, s| {
        let swap = n == "model.layers.2.linear_attn.in_proj_b.weight";
        Some((n.into(), if swap { vec![s[1], s[0]] } else { s.to_vec() }))
    });
    let e = load_err(&shaped);
    assert!(
        e.contains("model.safetensors: tensor `model.layers.2.linear_attn.in_proj_b.weight`: expected shape [4, 32], found [32, 4]"),
        "{e}"
    );

    let trunc = root.path().join("truncated");
    std::fs::create_dir_all(&trunc).unwrap();
    std::fs::copy(good.join("config.json"), trunc.join("config.json")).unwrap();
    std::fs::write(trunc.join("model.safetensors"), [1u8, 2, 3]).unwrap();
    let e = load_err(&trunc);
    assert!(
        e.contains("model.safetensors: invalid safetensors file"),
        "{e}"
    );

    // Unsupported dtype: relabel one F32 tensor as I32 (same element size).
    let i32dir = root.path().join("i32");
    std::fs::create_dir_all(&i32dir).unwrap();
    std::fs::copy(good.join("config.json"), i32dir.join("config.json")).unwrap();
    let bytes = std::fs::read(good.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header["model.norm.weight"]["dtype"] = "I32".into();
    let hb = serde_json::to_vec(&header).unwrap();
    let mut out = (hb.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&hb);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(i32dir.join("model.safetensors"), out).unwrap();
    let e = load_err(&i32dir);
    assert!(
        e.contains("`model.norm.weight`: unsupported dtype I32"),
        "{e}"
    );
}

#[test]
fn text_input_needs_a_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    write_random_model(dir.path(), &SyntheticSpec::tiny(), 4).unwrap();
    let m = HybridLM::load(dir.path()).unwrap();
    assert!(m.tokenizer().is_none());
    let e = m.encode("hello").unwrap_err().to_string();
    assert!(e.contains("tokenizer.json") && e.contains("missing"), "{e}");
    // A broken tokenizer.json is an error naming the file.
    std::fs::write(dir.path().join("tokenizer.json"), "not json").unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("tokenizer.json: cannot load tokenizer"), "{e}");
}

#[test]
fn qwen_tokenizer_adds_no_bos() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/qwen35-tokenizer");
    let dir = std::env::var_os("LSE_TOKENIZER_DIR")
        .map(Into::into)
        .unwrap_or(dir);
    let t = lse_runtime::model::tokenizer::TextTokenizer::load(&dir)
        .unwrap()
        .expect("tokenizer.json present");
    assert_eq!(t.bos(), None);
    let ids = t.encode("Hello world").unwrap();
    assert!(!ids.is_empty() && ids.len() <= 3, "{ids:?}");
}

#[test]
fn score_hands_the_head_exactly_the_requested_rows_in_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SyntheticSpec::tiny();
    write_random_model(dir.path(), &spec, 11).unwrap();
    let model = HybridLM::load(dir.path()).unwrap();
    let toks = tokens(90, spec.vocab_size);
    let dim = model.config().hidden_size;
    let whole = Generator::new(&model, dense(), DType::F32, 128)
        .unwrap()
        .prefill(&toks, 90, 90)
        .unwrap();

    // Passes of 7 tokens, blocks of at most 4 rows, rows 40..83 wanted.
    let mut got = Vec::new();
    let mut g = Generator::new(&model, dense(), DType::F32, 128).unwrap();
    g.score(
        &toks,
        40..83,
        16,
        7,
        4,
        |hidden: DevSlice<'_, f32>, rows: std::ops::Range<usize>| -> Result<(), ModelError> {
            assert!(rows.len() <= 4 && !rows.is_empty());
            assert_eq!(hidden.len(), rows.len() * dim);
            let mut host = vec![0.0; hidden.len()];
            model.device().download(hidden, &mut host).unwrap();
            got.push((rows, host));
            Ok(())
        },
    )
    .unwrap();
    let delivered: Vec<usize> = got.iter().flat_map(|(r, _)| r.clone()).collect();
    assert_eq!(delivered, (40..83).collect::<Vec<_>>());
    for (rows, hidden) in &got {
        let want = &whole[rows.start * dim..rows.end * dim];
        assert!(max_abs(hidden, want) < 1e-4, "rows {rows:?}");
    }
}
