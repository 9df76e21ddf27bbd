//! End-to-end tests of `lse perplexity` on the golden models: transformers' perplexities,
//! the JSON contract, pass-plan and device invariance, KL divergence, and every refusal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn big_vocab_model() -> PathBuf {
    repo().join("tests/data/models/big_vocab_bf16")
}

fn golden() -> Value {
    let text = std::fs::read_to_string(big_vocab_model().join("ppl_golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The golden's text, written to a file in `dir`.
fn golden_text(dir: &Path) -> PathBuf {
    let path = dir.join("sample.txt");
    std::fs::write(&path, golden()["text"].as_str().unwrap()).unwrap();
    path
}

fn lse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `lse perplexity` on the big-vocabulary golden model and the golden's text (written
/// into `dir`), with `extra` options.
fn on_sample(dir: &Path, extra: &[&str]) -> Output {
    let text = golden_text(dir);
    let model = big_vocab_model();
    let (model, text) = (model.to_str().unwrap(), text.to_str().unwrap());
    lse(&[
        &[
            "perplexity",
            "--model",
            model,
            "--perplexity",
            text,
            "--quiet",
        ],
        extra,
    ]
    .concat())
}

/// [`on_sample`], which must succeed; returns the parsed report.
fn perplexity(dir: &Path, extra: &[&str]) -> Value {
    let out = on_sample(dir, extra);
    assert!(
        out.status.success(),
        "lse perplexity {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, expected {want} (tolerance {tol})"
    );
}

#[test]
fn chunks_perplexity_matches_transformers_on_both_cpu_devices() {
    let dir = tempfile::tempdir().unwrap();
    let want = &golden()["chunks"];
    for pool in ["cpu", "host"] {
        let r = perplexity(
            dir.path(),
            &[
                "--pool",
                pool,
                "--perplexity-ctx",
                "64",
                "--kv-cache-dtype",
                "f32",
            ],
        );
        assert_eq!(r["windows_scored"], want["windows_scored"], "{pool}");
        assert_eq!(r["scored_tokens"], want["scored_tokens"], "{pool}");
        // transformers ran in float32 with bf16-stored weights; so do we, in another order.
        assert_close(f(&r["mean_nll"]), f(&want["mean_nll"]), 2e-5, pool);
        for (w, g) in r["windows"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want["windows"].as_array().unwrap())
        {
            for key in ["index", "begin", "end", "first_target", "scored"] {
                assert_eq!(w[key], g[key], "{pool} window {key}");
            }
            assert_close(
                f(&w["nll_sum"]),
                f(&g["nll_sum"]),
                31.0 * 2e-5,
                "window nll_sum",
            );
        }
        let rel_unc = f(&r["perplexity_uncertainty"]) / f(&r["perplexity"]);
        assert_close(
            rel_unc,
            f(&want["perplexity_uncertainty"]) / f(&want["perplexity"]),
            1e-4,
            "relative ±",
        );
    }
}

#[test]
fn sliding_perplexity_matches_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let want = &golden()["sliding"];
    let r = perplexity(
        dir.path(),
        &[
            "--perplexity-method",
            "sliding",
            "--perplexity-ctx",
            "64",
            "--perplexity-stride",
            "32",
            "--kv-cache-dtype",
            "f32",
        ],
    );
    assert_eq!(r["windows_scored"], want["windows_scored"]);
    assert_eq!(r["scored_tokens"], want["scored_tokens"]);
    assert_close(
        f(&r["mean_nll"]),
        f(&want["mean_nll"]),
        2e-5,
        "sliding mean_nll",
    );
}

#[test]
fn report_has_every_field_of_the_brief_and_the_token_hash() {
    let dir = tempfile::tempdir().unwrap();
    let r = perplexity(
        dir.path(),
        &[
            "--perplexity-ctx",
            "64",
            "--perplexity-chunks",
            "3",
            "--perplexity-token-ids",
        ],
    );
    let g = golden();
    assert_eq!(r["object"], "lse.perplexity");
    assert_eq!(r["tokens"], g["tokens"]);
    assert_eq!(r["token_ids_sha256"], g["token_ids_sha256"]);
    assert_eq!(r["token_ids"], g["token_ids"]);
    assert_eq!(r["method"], "chunks");
    assert_eq!(r["windows_scored"], 3);
    assert_eq!(r["prefill_tokens"], 3 * 64);
    for key in [
        "ctx",
        "stride",
        "scored_tokens",
        "mean_nll",
        "perplexity",
        "perplexity_uncertainty",
        "elapsed_seconds",
        "prefill_tokens_per_second",
    ] {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    let config = &r["config"];
    for key in [
        "device_arch",
        "prefill_attention",
        "prefill_attention_scale",
        "kv_cache_dtype",
        "kv_capacity",
        "batch_size",
        "ubatch_size",
        "head_rows",
        "cpu_fallback_allowed",
    ] {
        assert!(config.get(key).is_some(), "missing config.{key}");
    }
    assert_eq!(config["head_rows"], 128);
    assert_eq!(config["prefill_attention"], "dense");
    let w0 = &r["windows"][0];
    for key in [
        "index",
        "begin",
        "end",
        "first_target",
        "scored",
        "nll_sum",
        "mean_nll",
        "perplexity",
        "seconds",
    ] {
        assert!(w0.get(key).is_some(), "missing windows[0].{key}");
    }
}

#[test]
fn perplexity_does_not_depend_on_the_pass_plan() {
    let dir = tempfile::tempdir().unwrap();
    let base = &[
        "--perplexity-ctx",
        "64",
        "--perplexity-chunks",
        "2",
        "--kv-cache-dtype",
        "f32",
    ];
    let whole = perplexity(dir.path(), base);
    let mut args = base.to_vec();
    args.extend_from_slice(&["--batch-size", "16", "--ubatch-size", "5"]);
    let split = perplexity(dir.path(), &args);
    let (a, b) = (f(&whole["mean_nll"]), f(&split["mean_nll"]));
    assert!(
        (a - b).abs() <= 1e-5 * a.abs(),
        "one pass {a} vs ubatch 5 {b}"
    );
}

#[test]
fn kl_divergence_of_a_run_against_its_own_base_is_zero_and_refuses_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.kld");
    let common = ["--perplexity-ctx", "64", "--perplexity-chunks", "4"];
    let mut record = common.to_vec();
    record.extend_from_slice(&[
        "--pool",
        "cpu",
        "--perplexity-kld-base-out",
        base.to_str().unwrap(),
    ]);
    let r = perplexity(dir.path(), &record);
    let scored = r["scored_tokens"].as_u64().unwrap();
    assert_eq!(
        std::fs::metadata(&base).unwrap().len(),
        88 + 264 * scored,
        "header + 264 bytes per token"
    );

    let mut compare = common.to_vec();
    compare.extend_from_slice(&["--pool", "host", "--perplexity-kld", base.to_str().unwrap()]);
    let r = perplexity(dir.path(), &compare);
    let kld = &r["kld"];
    assert_eq!(kld["tokens"].as_u64().unwrap(), scored);
    assert_eq!(kld["top_k"], 32);
    assert!(f(&kld["mean_kld"]).abs() < 1e-6, "{kld}");
    assert_eq!(f(&kld["same_top"]), 1.0);
    assert_close(f(&kld["perplexity_ratio"]), 1.0, 1e-5, "ppl ratio");

    // Another ctx scores other tokens: refused, saying what differs.
    let out = on_sample(
        dir.path(),
        &[
            "--perplexity-ctx",
            "32",
            "--perplexity-chunks",
            "4",
            "--perplexity-kld",
            base.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ctx"), "{err}");
}

#[test]
fn flashprefill_v2_runs_when_asked_and_equals_dense_when_it_keeps_every_block() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("dense.kld");
    // ctx 256 in blocks of 64: 4 query blocks per chunk.
    let common = [
        "--perplexity-ctx",
        "256",
        "--perplexity-chunks",
        "2",
        "--flashprefill-block-size",
        "64",
    ];
    let with = |extra: &[&str]| -> Value {
        let mut args = common.to_vec();
        args.extend_from_slice(extra);
        perplexity(dir.path(), &args)
    };
    let dense = with(&["--perplexity-kld-base-out", base.to_str().unwrap()]);
    // Unset, a 256-token pass is below the cut-over: dense.
    assert_eq!(dense["config"]["prefill_attention"], "dense");
    assert_eq!(dense["config"]["prefill_attention_scale"], 0.1);

    // The default window of 4 blocks keeps every block of a 4-block pass: same numbers.
    let all = with(&["--FlashPrefillV2=on"]);
    assert_eq!(all["config"]["prefill_attention"], "flashprefill-v2");
    assert_eq!(all["mean_nll"], dense["mean_nll"]);

    // Only the best-scoring block and the diagonal: sparse, so it moves off the base.
    let sparse = with(&[
        "--FlashPrefillV2=on",
        "--prefill-attention-scale",
        "1",
        "--flashprefill-sink-blocks",
        "0",
        "--flashprefill-window-blocks",
        "1",
        "--flashprefill-last-full-blocks",
        "0",
        "--perplexity-kld",
        base.to_str().unwrap(),
    ]);
    assert_eq!(sparse["config"]["prefill_attention_scale"], 1.0);
    let kld = f(&sparse["kld"]["mean_kld"]);
    assert!(kld > 0.0 && kld.is_finite(), "{}", sparse["kld"]);
    let off = with(&["--FlashPrefillV2=off", "--prefill-attention-scale", "1"]);
    assert_eq!(off["config"]["prefill_attention"], "dense");
    assert_eq!(off["mean_nll"], dense["mean_nll"]);
}

/// Checks that a run failed without printing a report; returns its stderr.
fn failed(out: Output) -> String {
    assert!(!out.status.success(), "the run succeeded");
    assert!(out.stdout.is_empty(), "a failed run printed a report");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_inputs_fail_clearly_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = big_vocab_model();
    let model = model.to_str().unwrap();
    let sample = |extra: &[&str]| failed(on_sample(dir.path(), extra));

    let text = golden_text(dir.path());
    let err = failed(lse(&[
        "perplexity",
        "--model",
        "/nonexistent/model",
        "--perplexity",
        text.to_str().unwrap(),
    ]));
    assert!(err.contains("/nonexistent/model"), "{err}");

    // 973 tokens cannot hold two chunks of 512.
    let err = sample(&[]);
    assert!(err.contains("512"), "{err}");

    let out_path = dir.path().join("missing-dir/out.json");
    let err = sample(&[
        "--perplexity-ctx",
        "64",
        "--perplexity-output",
        out_path.to_str().unwrap(),
    ]);
    assert!(err.contains("missing-dir"), "{err}");
    assert!(!out_path.exists());

    for (option, value) in [
        ("--prefill-attention-scale", "1.5"),
        ("--flashprefill-block-size", "100"),
        ("--flashprefill-window-blocks", "0"),
    ] {
        let err = sample(&["--perplexity-ctx", "64", option, value]);
        assert!(err.contains(option) && err.contains(value), "{err}");
    }

    let err = sample(&["--perplexity-ctx", "64", "--no-cpu-fallback"]);
    // Attention has LOOM kernels on the host device; the rest of the forward pass does not.
    assert!(
        err.contains("gated_deltanet") && !err.contains("attention"),
        "{err}"
    );

    let err = sample(&["--pool", "hip:0"]);
    assert!(err.contains("no HIP runtime"), "{err}");
    let err = sample(&["--pool", "cuda:0"]);
    assert!(err.contains("no CUDA"), "{err}");

    let bad_base = dir.path().join("bad.kld");
    std::fs::write(&bad_base, b"not a base file").unwrap();
    let err = sample(&[
        "--perplexity-ctx",
        "64",
        "--perplexity-kld",
        bad_base.to_str().unwrap(),
    ]);
    assert!(err.contains("bad.kld"), "{err}");

    let tokens = dir.path().join("tokens.json");
    let tokens_arg = tokens.to_str().unwrap();
    let with_tokens = |extra: &[&str]| {
        failed(lse(&[
            &[
                "perplexity",
                "--model",
                model,
                "--perplexity-tokens",
                tokens_arg,
            ],
            extra,
        ]
        .concat()))
    };
    std::fs::write(&tokens, "[1, 2, 999999999]").unwrap();
    let err = with_tokens(&["--perplexity-ctx", "3"]);
    assert!(err.contains("999999999"), "{err}");

    std::fs::write(&tokens, "[1, \"two\"]").unwrap();
    let err = with_tokens(&[]);
    assert!(
        err.contains("tokens.json") && err.contains("JSON array"),
        "{err}"
    );
}

#[test]
fn output_file_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("ppl.json");
    let out = on_sample(
        dir.path(),
        &[
            "--perplexity-ctx",
            "64",
            "--perplexity-chunks",
            "2",
            "--perplexity-output",
            out_path.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(report["windows_scored"], 2);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "only sample.txt and ppl.json remain: {leftovers:?}"
    );
}

/// NLL of chunk 0 from transformers' log-probs in `golden.json`: `logprobs[t]` is the
/// log-softmax after reading tokens 0..=t and `columns` names each column's token id, so the
/// NLL of predicting `token_ids[p + 1]` at position p is `-logprobs[p][column of it]`.
fn golden_chunk_nll(golden: &Value, first: usize, scored: usize) -> f64 {
    let ids: Vec<u64> = golden["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let columns = golden["columns"].as_array().unwrap();
    let column_of = |id: u64| {
        columns
            .iter()
            .position(|c| c.as_u64() == Some(id))
            .unwrap_or_else(|| panic!("token {id} has no column"))
    };
    (first..first + scored)
        .map(|p| -f(&golden["logprobs"][p][column_of(ids[p + 1])]))
        .sum()
}

#[test]
fn f32_and_moe_models_score_chunk_zero_like_transformers() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["dense_tied_f32", "moe_fused"] {
        let model = repo().join("tests/data/models").join(name);
        let golden: Value =
            serde_json::from_str(&std::fs::read_to_string(model.join("golden.json")).unwrap())
                .unwrap();
        assert_eq!(golden["token_ids"].as_array().unwrap().len(), 100, "{name}");
        let tokens = dir.path().join(format!("{name}.json"));
        std::fs::write(&tokens, golden["token_ids"].to_string()).unwrap();
        let args = [
            "perplexity",
            "--model",
            model.to_str().unwrap(),
            "--perplexity-tokens",
            tokens.to_str().unwrap(),
            "--perplexity-ctx",
            "50",
            "--kv-cache-dtype",
            "f32",
            "--quiet",
        ];
        let out = lse(&args);
        assert!(
            out.status.success(),
            "lse {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let windows = r["windows"].as_array().unwrap();
        assert_eq!(windows.len(), 2, "{name}: two chunks of 50");
        // Each chunk scores positions 25..=48, predicting tokens 26..=49 of the chunk.
        for (i, w) in windows.iter().enumerate() {
            assert_eq!(w["begin"], 50 * i, "{name} chunk {i}");
            assert_eq!(w["first_target"], 50 * i + 26, "{name} chunk {i}");
            assert_eq!(w["scored"], 24, "{name} chunk {i}");
            assert!(
                f(&w["nll_sum"]).is_finite() && f(&w["nll_sum"]) > 0.0,
                "{name} chunk {i}: {w}"
            );
        }
        // Chunk 1 restarts from an empty state while the golden ran all 100 tokens as one
        // sequence, so only chunk 0 is comparable.
        let want = golden_chunk_nll(&golden, 25, 24);
        assert_close(
            f(&windows[0]["nll_sum"]),
            want,
            1e-3,
            &format!("{name} chunk 0 nll_sum"),
        );
    }
}
