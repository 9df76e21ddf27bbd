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

/// `--gemm-activations bf16x3` keeps transformers' f32 products (on an AMX CPU as three exact
/// bf16 pieces per activation, elsewhere as the default), so the golden's perplexity holds
/// as tightly as under the default, and the report says which products ran.
#[test]
fn bf16x3_activations_match_transformers_and_are_named_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let want = &golden()["chunks"];
    let args = ["--perplexity-ctx", "64", "--kv-cache-dtype", "f32"];
    let reference = perplexity(dir.path(), &args);
    let r = perplexity(
        dir.path(),
        &[&args[..], &["--gemm-activations", "bf16x3"]].concat(),
    );
    assert_eq!(r["config"]["gemm_activations"], "bf16x3");
    assert!(reference["config"].get("gemm_activations").is_none());
    assert_eq!(r["scored_tokens"], want["scored_tokens"]);
    assert_close(f(&r["mean_nll"]), f(&want["mean_nll"]), 2e-5, "bf16x3");
    assert_close(
        f(&r["mean_nll"]),
        f(&reference["mean_nll"]),
        1e-5,
        "bf16x3 vs reference",
    );
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
        120 + 264 * scored,
        "header (format version 2) + 264 bytes per token"
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
    assert_eq!(dense["config"]["prefill_attention_scale"], 0.5);

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

#[test]
fn a_report_on_stdout_to_a_closed_reader_stops_quietly_with_the_sigpipe_status() {
    let dir = tempfile::tempdir().unwrap();
    let text = golden_text(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(["perplexity", "--model", big_vocab_model().to_str().unwrap()])
        .args(["--perplexity", text.to_str().unwrap(), "--quiet"])
        .args(["--perplexity-ctx", "64", "--perplexity-chunks", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "{err}");
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
fn f32_and_moe_models_score_chunk_zero_like_transformers_with_and_without_cpu_fallback() {
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

        // Every operation has a LOOM kernel on the host device, so refusing the CPU backend
        // runs the same kernels and gives the same numbers.
        let strict = lse(&[&args[..], &["--no-cpu-fallback"]].concat());
        assert!(
            strict.status.success(),
            "{name} --no-cpu-fallback: {}",
            String::from_utf8_lossy(&strict.stderr)
        );
        let s: Value = serde_json::from_slice(&strict.stdout).unwrap();
        assert_eq!(s["perplexity"], r["perplexity"], "{name}");
        for (a, b) in s["windows"].as_array().unwrap().iter().zip(windows) {
            assert_eq!(a["nll_sum"], b["nll_sum"], "{name}");
        }
    }
}

/// Runs `lse perplexity` on the golden text without `--quiet`, stderr redirected to a pipe
/// (not a terminal), the JSON into `name` in `dir`; returns stderr and the report.
fn loud(dir: &Path, name: &str, extra: &[&str]) -> (String, Value) {
    let text = golden_text(dir);
    let (model, json) = (big_vocab_model(), dir.join(name));
    let out = lse(&[
        &[
            "perplexity",
            "--model",
            model.to_str().unwrap(),
            "--perplexity",
            text.to_str().unwrap(),
            "--perplexity-output",
            json.to_str().unwrap(),
        ],
        extra,
    ]
    .concat());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{err}");
    assert!(out.stdout.is_empty());
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (err, report)
}

#[test]
fn summary_is_printed_on_redirected_stderr_as_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (err, r) = loud(dir.path(), "ppl.json", &["--perplexity-ctx", "64"]);
    let want = [
        format!(
            "lse perplexity: {} tokens, {} chunks of 64 (stride 64), {} tokens scored",
            r["tokens"], r["windows_scored"], r["scored_tokens"]
        ),
        format!(
            "Final estimate: PPL = {:.4} +/- {:.5}",
            f(&r["perplexity"]),
            f(&r["perplexity_uncertainty"])
        ),
        format!(
            "{} prefill tokens in {:.2} s: {:.1} tokens/s on {}, prefill attention dense, KV cache bf16",
            r["prefill_tokens"],
            f(&r["elapsed_seconds"]),
            f(&r["prefill_tokens_per_second"]),
            r["config"]["device_arch"].as_str().unwrap()
        ),
        format!("JSON report written to {}", dir.path().join("ppl.json").display()),
    ];
    for line in &want {
        assert!(
            err.lines().any(|l| l == line),
            "no line {line:?} in:\n{err}"
        );
    }
    // No progress bar off a terminal: no carriage returns, no escape sequences.
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(!err.contains("KL divergence"), "no comparison, no table");

    // A run with rounded activations says so on the same line.
    let (err, r) = loud(
        dir.path(),
        "rounded.json",
        &[
            "--perplexity-ctx",
            "64",
            "--gemm-activations",
            "weight-dtype",
        ],
    );
    assert_eq!(r["config"]["gemm_activations"], "weight-dtype");
    assert!(
        err.lines()
            .any(|l| l.ends_with(", KV cache bf16, GEMM activations weight-dtype")),
        "{err}"
    );

    // --quiet: nothing at all.
    let out = on_sample(dir.path(), &["--perplexity-ctx", "64"]);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sorted_f32(v: &Value) -> Vec<f64> {
    let mut v: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| f(x) as f32 as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

#[test]
fn kl_table_on_stderr_is_the_json_statistics_and_agrees_with_the_per_token_values() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.kld");
    let common = ["--perplexity-ctx", "32", "--perplexity-token-stats"];
    let mut record = common.to_vec();
    record.extend(["--pool", "cpu", "--kv-cache-dtype", "f32"]);
    record.extend(["--perplexity-kld-base-out", base.to_str().unwrap()]);
    let (err, b) = loud(dir.path(), "base.json", &record);
    assert!(err.contains(&format!("KL-divergence base written to {}", base.display())));
    assert!(b.get("kld_statistics").is_none() && b["token_stats"].get("kld").is_none());

    let mut compare = common.to_vec();
    compare.extend([
        "--kv-cache-dtype",
        "bf16",
        "--perplexity-kld",
        base.to_str().unwrap(),
    ]);
    let (err, r) = loud(dir.path(), "cmp.json", &compare);
    let (k, t, ts) = (&r["kld"], &r["kld_statistics"], &r["token_stats"]);
    let n = r["scored_tokens"].as_u64().unwrap();
    assert_eq!(t["tokens"].as_u64(), Some(n));

    // The table repeats the brief's fields where they overlap.
    for (table, brief) in [
        ("mean_ppl", "perplexity"),
        ("base_mean_ppl", "base_perplexity"),
        ("mean_ln_ratio", "mean_log_ratio"),
        ("mean_ln_ratio_uncertainty", "mean_log_ratio_uncertainty"),
        ("ppl_ratio", "perplexity_ratio"),
        ("delta_ppl", "delta_perplexity"),
        ("mean_kld", "mean_kld"),
        ("mean_kld_uncertainty", "mean_kld_uncertainty"),
        ("mean_delta_p", "mean_delta_p"),
        ("rms_delta_p", "rms_delta_p"),
        ("same_top", "same_top"),
        ("same_top_uncertainty", "same_top_uncertainty"),
    ] {
        assert_eq!(t[table], k[brief], "{table} vs kld.{brief}");
    }
    assert_eq!(t["kld_quantiles"]["p99"], k["kld_p99"]);
    assert_eq!(t["kld_quantiles"]["max"], k["kld_max"]);

    // The per-token values (f32) give the same statistics to f32 precision.
    let nll = sorted_f32(&ts["nll"]);
    assert_eq!(nll.len() as u64, n);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert_close(mean(&nll), f(&r["mean_nll"]), 1e-6, "mean of token NLLs");
    let kld = sorted_f32(&ts["kld"]);
    let dp = sorted_f32(&ts["delta_p"]);
    assert_close(
        mean(&kld),
        f(&t["mean_kld"]),
        1e-7 + 1e-6 * f(&t["mean_kld"]),
        "mean KLD",
    );
    assert_close(mean(&dp), f(&t["mean_delta_p"]), 1e-7, "mean Δp");
    let q = |v: &[f64], p: f64| {
        let h = p * (v.len() - 1) as f64;
        let lo = h.floor() as usize;
        v[lo] + (h - lo as f64) * (v[(lo + 1).min(v.len() - 1)] - v[lo])
    };
    for (key, p) in [
        ("max", 1.0),
        ("p99", 0.99),
        ("p90", 0.9),
        ("median", 0.5),
        ("p10", 0.1),
        ("min", 0.0),
    ] {
        for (values, table) in [(&kld, "kld_quantiles"), (&dp, "delta_p_quantiles")] {
            let want = q(values, p);
            assert_close(
                f(&t[table][key]),
                want,
                1e-9 + 1e-6 * want.abs(),
                &format!("{table}.{key}"),
            );
        }
    }

    // stderr shows llama.cpp's three blocks with these numbers.
    for line in [
        format!(
            "KL divergence against {} (top 32 ids per token), {n} tokens",
            base.display()
        ),
        "====== Perplexity statistics ======".to_string(),
        format!(
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            f(&t["mean_ppl"]),
            f(&t["mean_ppl_uncertainty"])
        ),
        format!(
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            f(&t["base_mean_ppl"]),
            f(&t["base_mean_ppl_uncertainty"])
        ),
        format!(
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            f(&t["ppl_ratio"]),
            f(&t["ppl_ratio_uncertainty"])
        ),
        format!(
            "Mean    KLD: {:10.6} ± {:10.6}",
            f(&t["mean_kld"]),
            f(&t["mean_kld_uncertainty"])
        ),
        format!("Maximum KLD: {:10.6}", f(&t["kld_quantiles"]["max"])),
        format!("99.9%   KLD: {:10.6}", f(&t["kld_quantiles"]["p99.9"])),
        format!("Median  KLD: {:10.6}", f(&t["kld_quantiles"]["median"])),
        format!("Minimum KLD: {:10.6}", f(&t["kld_quantiles"]["min"])),
        format!(
            "75.0%   Δp: {:6.3}%",
            100.0 * f(&t["delta_p_quantiles"]["p75"])
        ),
        format!(
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * f(&t["rms_delta_p"]),
            100.0 * f(&t["rms_delta_p_uncertainty"])
        ),
        format!(
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * f(&t["same_top"]),
            100.0 * f(&t["same_top_uncertainty"])
        ),
    ] {
        assert!(
            err.lines().any(|l| l == line),
            "no line {line:?} in:\n{err}"
        );
    }
    assert_eq!(err.lines().filter(|l| l.contains(" KLD: ")).count(), 12);
    assert_eq!(err.lines().filter(|l| l.contains(" Δp: ")).count(), 14);
}

/// `--kernel-times` prints, even with `--quiet`, one row per kernel the run launched (its
/// launches and time, the largest first) under the totals, then the largest rows of those
/// launches split by their scalar arguments (a GEMM's `m`, `n`, `k`), and leaves the report
/// alone.
#[test]
fn kernel_times_list_every_launched_kernel_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let plain = perplexity(dir.path(), &["--perplexity-ctx", "64"]);
    let out = on_sample(dir.path(), &["--perplexity-ctx", "64", "--kernel-times"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["mean_nll"], plain["mean_nll"]);
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines[0].starts_with("kernel times on host-"), "{err}");
    let split = lines
        .iter()
        .position(|l| l.starts_with("by scalar arguments, the "))
        .unwrap_or_else(|| panic!("no second table in:\n{err}"));
    // "by scalar arguments, the SHOWN largest of ALL:"
    let counts: Vec<usize> = lines[split]
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let parse = |l: &&str| -> (f64, u64, String) {
        let f: Vec<&str> = l.split_whitespace().collect();
        (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3..].join(" "),
        )
    };
    let rows: Vec<(f64, u64, String)> = lines[2..split].iter().map(parse).collect();
    let by_args: Vec<(f64, u64, String)> = lines[split + 2..].iter().map(parse).collect();
    assert_eq!(counts, [by_args.len(), counts[1]], "{err}");
    assert!(
        by_args.len() == counts[1].min(15) && by_args.len() > 1,
        "{err}"
    );
    assert!(
        by_args.iter().any(|r| r.2.starts_with("gemm.xwt_exact")
            && r.2.contains(" m=")
            && r.2.contains(" k=")),
        "no GEMM row with its shape in:\n{err}"
    );
    assert!(
        by_args.windows(2).all(|w| w[0].0 >= w[1].0),
        "not largest first:\n{err}"
    );
    for kernel in [
        "gemm.xwt_exact",
        "norm.add_rmsnorm",
        "deltanet.delta_rule",
        "attention.prefill",
    ] {
        assert!(
            rows.iter().any(|r| r.2.starts_with(kernel) && r.1 > 0),
            "no {kernel} row in:\n{err}"
        );
    }
    assert!(
        rows.windows(2).all(|w| w[0].0 >= w[1].0),
        "not largest first:\n{err}"
    );
}

/// `LSE_HOST_CPU` runs a lower host level with the same result (the model's GEMM and every
/// other kernel keep the reference's operation order on every level), and a level this CPU
/// cannot run (or that does not exist) is refused before any work, naming the variable.
#[test]
fn lse_host_cpu_runs_the_named_level_and_refuses_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let text = golden_text(dir.path());
    let model = big_vocab_model();
    let run = |level: &str| {
        Command::new(env!("CARGO_BIN_EXE_lse"))
            .env("LSE_HOST_CPU", level)
            .args(["perplexity", "--model", model.to_str().unwrap()])
            .args(["--perplexity", text.to_str().unwrap(), "--quiet"])
            .args(["--perplexity-ctx", "64", "--kv-cache-dtype", "f32"])
            .output()
            .unwrap()
    };
    let best = perplexity(
        dir.path(),
        &["--perplexity-ctx", "64", "--kv-cache-dtype", "f32"],
    );
    let base = run("x86-64");
    assert!(
        base.status.success(),
        "{}",
        String::from_utf8_lossy(&base.stderr)
    );
    let base: Value = serde_json::from_slice(&base.stdout).unwrap();
    assert_eq!(base["config"]["device_arch"], "host-x86-64");
    assert_eq!(base["mean_nll"], best["mean_nll"]);
    for bad in ["pentium", "", "x86-64-v9"] {
        let out = run(bad);
        assert!(!out.status.success(), "LSE_HOST_CPU={bad:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("LSE_HOST_CPU"), "{err}");
        assert!(out.stdout.is_empty());
    }
}
