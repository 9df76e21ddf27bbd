//! `lse perplexity` and `lse synthetic-model` against inputs that must not destroy a file,
//! panic or slip through: outputs through symlinks, FIFOs and `-`; one file in two roles;
//! huge sizes; damaged or mismatched KL-divergence bases; signals; checks that must come
//! before the model loads; and unclear messages.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::Digest;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn model() -> String {
    repo()
        .join("tests/data/models/big_vocab_bf16")
        .to_string_lossy()
        .into_owned()
}

fn lse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(args)
        .env_remove("LSE_REQUIRE_DEVICE_KERNELS")
        .output()
        .unwrap()
}

/// The golden text, written into `dir`.
fn text(dir: &Path) -> String {
    let golden = repo().join("tests/data/models/big_vocab_bf16/ppl_golden.json");
    let golden: Value = serde_json::from_str(&fs::read_to_string(golden).unwrap()).unwrap();
    let path = dir.join("sample.txt");
    fs::write(&path, golden["text"].as_str().unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

/// The command `lse perplexity` on the golden model and text with ctx 64, two chunks, and
/// `extra`.
fn score_command(dir: &Path, extra: &[&str]) -> Command {
    let text = text(dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lse"));
    cmd.args([
        "perplexity",
        "--model",
        &model(),
        "--perplexity",
        &text,
        "--quiet",
        "--perplexity-ctx",
        "64",
        "--perplexity-chunks",
        "2",
    ])
    .args(extra)
    .env_remove("LSE_REQUIRE_DEVICE_KERNELS");
    cmd
}

/// Runs [`score_command`].
fn score(dir: &Path, extra: &[&str]) -> Output {
    score_command(dir, extra).output().unwrap()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Checks that a run failed cleanly (exit 1, no report, no panic); returns its stderr.
fn refused(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "expected a refusal: {err}");
    assert!(out.stdout.is_empty(), "a refused run printed a report");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Names in `dir` holding `.lse-tmp`.
fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".lse-tmp") || n.contains(".lse-old"))
        .collect()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn outputs_through_symlinks_fifos_and_dash_write_the_target_and_replace_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A symlink: its target gets the report, the link stays a link.
    let real = d.join("real.json");
    fs::write(&real, "old").unwrap();
    let link = d.join("link.json");
    symlink("real.json", &link).unwrap();
    ok(score(d, &["--perplexity-output", s(&link)]));
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let report: Value = serde_json::from_str(&fs::read_to_string(&real).unwrap()).unwrap();
    assert_eq!(report["windows_scored"], 2);

    // A FIFO: written straight to its reader, still a FIFO afterwards.
    let fifo = d.join("report.fifo");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        })
    };
    ok(score(d, &["--perplexity-output", s(&fifo)]));
    let got: Value = serde_json::from_str(&reader.join().unwrap()).unwrap();
    assert_eq!(got["windows_scored"], 2);
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());

    // `-`: standard output, and no file named `-`.
    let out = ok(score(d, &["--perplexity-output", "-"]));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["windows_scored"], 2);
    assert!(!d.join("-").exists());
    // /dev/stdout (a link to the process's descriptor, here a pipe): written through.
    let out = ok(score(d, &["--perplexity-output", "/dev/stdout"]));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["windows_scored"], 2);
    // /dev/stdout redirected to a file: the file is written, not replaced.
    let redirected = d.join("redirected.json");
    let file = fs::File::create(&redirected).unwrap();
    let inode = fs::metadata(&redirected).unwrap().ino();
    let status = score_command(d, &["--perplexity-output", "/dev/stdout"])
        .stdout(file)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(fs::metadata(&redirected).unwrap().ino(), inode);
    let got: Value = serde_json::from_str(&fs::read_to_string(&redirected).unwrap()).unwrap();
    assert_eq!(got["windows_scored"], 2);

    // The base needs a regular file: a FIFO or `-` is refused before any work, untouched.
    let err = refused(score(d, &["--perplexity-kld-base-out", s(&fifo)]));
    assert!(
        err.contains("report.fifo") && err.contains("it is a FIFO") && err.contains("regular file"),
        "{err}"
    );
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let err = refused(score(d, &["--perplexity-kld-base-out", "-"]));
    assert!(err.contains("standard output"), "{err}");
    // A base through a symlink lands in the link's target.
    let base_link = d.join("base-link.kld");
    symlink(d.join("base-real.kld"), &base_link).unwrap();
    ok(score(d, &["--perplexity-kld-base-out", s(&base_link)]));
    assert!(fs::symlink_metadata(&base_link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::metadata(d.join("base-real.kld")).unwrap().len() > 120);
    assert!(temp_files(d).is_empty(), "{:?}", temp_files(d));
}

#[test]
fn one_file_in_two_roles_is_refused_before_loading_and_the_base_survives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = d.join("base.kld");
    ok(score(d, &["--perplexity-kld-base-out", s(&base)]));
    let before = fs::read(&base).unwrap();
    let alias = d.join("alias.kld");
    symlink(&base, &alias).unwrap();
    let dotted = d.join(".").join("base.kld");
    let new = d.join("new.json");
    let text = text(d);
    for args in [
        vec![
            "--perplexity-output",
            s(&base),
            "--perplexity-kld",
            s(&base),
        ],
        vec![
            "--perplexity-output",
            s(&alias),
            "--perplexity-kld",
            s(&base),
        ],
        vec![
            "--perplexity-output",
            s(&dotted),
            "--perplexity-kld",
            s(&base),
        ],
        vec![
            "--perplexity-output",
            s(&new),
            "--perplexity-kld-base-out",
            s(&new),
        ],
        vec!["--perplexity-output", &text],
        vec!["--perplexity-kld-base-out", &text],
    ] {
        // A model that does not exist: the refusal comes before anything loads.
        let mut full = vec![
            "perplexity",
            "--model",
            "/nonexistent/model",
            "--perplexity",
        ];
        full.push(&text);
        full.extend(&args);
        let err = refused(lse(&full));
        assert!(
            err.contains("are the same file") && !err.contains("nonexistent"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(fs::read(&base).unwrap(), before, "the base was changed");
    assert!(!new.exists());
    assert!(temp_files(d).is_empty());
}

#[test]
fn kv_lengths_beyond_memory_are_errors_that_say_how_much() {
    let dir = tempfile::tempdir().unwrap();
    for kv_len in [(1u64 << 40).to_string(), (1u64 << 57).to_string()] {
        let err = refused(score(dir.path(), &["--kv-len", &kv_len]));
        assert!(
            err.contains("the KV cache needs") && err.contains(&format!("--kv-len {kv_len}")),
            "{err}"
        );
    }
}

fn synthetic(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["synthetic-model", "--shape", "tiny", "--out", s(out)];
    args.extend(extra);
    lse(&args)
}

#[test]
fn synthetic_model_never_overwrites_a_model_or_writes_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("model");
    ok(synthetic(&out, &[]));
    assert!(out.join("config.json").is_file());
    let config = fs::read(out.join("config.json")).unwrap();

    // Non-empty: refused, untouched; --force replaces it.
    fs::write(out.join("mine.txt"), "keep").unwrap();
    let err = refused(synthetic(&out, &["--seed", "1"]));
    assert!(
        err.contains("is not empty") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(out.join("mine.txt")).unwrap(), "keep");
    ok(synthetic(&out, &["--seed", "1", "--force"]));
    assert!(!out.join("mine.txt").exists());
    assert_ne!(fs::read(out.join("config.json")).unwrap(), b"");
    assert!(out.join("model.safetensors").is_file() || out.join("config.json").is_file());

    // A symlink to a directory is refused even with --force; the target is untouched.
    let victim = d.join("victim");
    fs::create_dir(&victim).unwrap();
    fs::write(victim.join("config.json"), "precious").unwrap();
    let link = d.join("link");
    symlink(&victim, &link).unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let err = refused(synthetic(&link, extra));
        assert!(err.contains("is a symlink"), "{err}");
    }
    assert_eq!(
        fs::read_to_string(victim.join("config.json")).unwrap(),
        "precious"
    );

    // An empty directory is filled; a file is refused.
    let empty = d.join("empty");
    fs::create_dir(&empty).unwrap();
    ok(synthetic(&empty, &[]));
    assert_eq!(fs::read(empty.join("config.json")).unwrap(), config);
    let err = refused(synthetic(&empty.join("config.json"), &[]));
    assert!(err.contains("is not a directory"), "{err}");
    assert!(temp_files(d).is_empty(), "{:?}", temp_files(d));
}

/// Rewrites the records' checksum of a base after its records were edited.
fn reseal(bytes: &mut [u8]) {
    let digest: [u8; 32] = sha2::Sha256::digest(&bytes[120..]).into();
    bytes[88..120].copy_from_slice(&digest);
}

#[test]
fn damaged_and_mismatched_bases_are_refused_before_scoring() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = d.join("base.kld");
    // --perplexity-chunks 1000 on a 15-chunk text is no limit: recorded as none.
    let text = text(d);
    let model = model();
    let record = |extra: &[&str]| {
        let mut args = vec![
            "perplexity",
            "--model",
            &model,
            "--perplexity",
            &text,
            "--quiet",
            "--perplexity-ctx",
            "64",
            "--perplexity-kld-top-k",
            "4",
        ];
        args.extend(extra);
        lse(&args)
    };
    ok(record(&[
        "--perplexity-chunks",
        "1000",
        "--perplexity-kld-base-out",
        s(&base),
    ]));
    let good = fs::read(&base).unwrap();
    assert_eq!(&good[64..72], &[0u8; 8], "chunk limit in effect: all");
    assert_eq!(&good[8..12], &[2, 0, 0, 0], "format version 2");
    // Compared without a limit (and without a top-k: the base's is used): accepted.
    let compare = |path: &Path, extra: &[&str]| {
        let mut args = vec![
            "perplexity",
            "--model",
            &model,
            "--perplexity",
            &text,
            "--quiet",
            "--perplexity-ctx",
            "64",
            "--perplexity-kld",
            s(path),
        ];
        args.extend(extra);
        lse(&args)
    };
    let out = ok(compare(&base, &[]));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["kld"]["top_k"], 4);
    assert!(report["kld"]["mean_kld"].as_f64().unwrap().abs() < 1e-6);

    // A top-k that disagrees with the base is an error.
    let err = refused(compare(&base, &["--perplexity-kld-top-k", "8"]));
    assert!(
        err.contains("--perplexity-kld-top-k 8 disagrees") && err.contains("top-k 4"),
        "{err}"
    );

    // Record 3's NLL (offset 120 + 3 * 40) edited; first without fixing the checksum.
    let r3 = 120 + 3 * 40;
    let damaged = d.join("damaged.kld");
    for (value, says) in [
        (-0.5f64, "NLL -0.5 is negative"),
        (1e300, "larger than f32 logits can give"),
    ] {
        let mut bytes = good.clone();
        bytes[r3..r3 + 8].copy_from_slice(&value.to_le_bytes());
        reseal(&mut bytes);
        fs::write(&damaged, &bytes).unwrap();
        let err = refused(compare(&damaged, &[]));
        assert!(
            err.contains("damaged.kld")
                && err.contains("record 3 is invalid")
                && err.contains(says),
            "{err}"
        );
    }
    let mut bytes = good.clone();
    bytes[r3 + 12..r3 + 16].copy_from_slice(&0.5f32.to_le_bytes());
    reseal(&mut bytes);
    fs::write(&damaged, &bytes).unwrap();
    let err = refused(compare(&damaged, &[]));
    assert!(
        err.contains("log-prob 0.5 of id") && err.contains("above 0"),
        "{err}"
    );
    // A flipped bit that leaves every value plausible: the checksum catches it.
    let mut bytes = good.clone();
    bytes[r3 + 12] ^= 1;
    fs::write(&damaged, &bytes).unwrap();
    let err = refused(compare(&damaged, &[]));
    assert!(err.contains("the records' SHA-256 is"), "{err}");
    // A version 1 base.
    let mut v1 = good[..88].to_vec();
    v1[8] = 1;
    v1.extend_from_slice(&good[120..]);
    fs::write(&damaged, &v1).unwrap();
    let err = refused(compare(&damaged, &[]));
    assert!(
        err.contains("format version 1, this build reads version 2")
            && err.contains("record the base again"),
        "{err}"
    );
    // A damaged base is refused before the model loads.
    let err = refused(lse(&[
        "perplexity",
        "--model",
        "/nonexistent/model",
        "--perplexity",
        &text,
        "--perplexity-kld",
        s(&damaged),
    ]));
    assert!(
        err.contains("damaged.kld") && !err.contains("nonexistent"),
        "{err}"
    );
}

/// Starts a long base-recording run, waits for its temporary file, sends `signal`, and
/// checks that the run exits 130 leaving nothing behind.
fn interrupted_run_leaves_nothing(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = text(d);
    let base = d.join("base.kld");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args([
            "perplexity",
            "--model",
            &model(),
            "--perplexity",
            &text,
            "--quiet",
            "--perplexity-method",
            "sliding",
            "--perplexity-ctx",
            "64",
            "--perplexity-stride",
            "1",
            "--perplexity-kld-base-out",
            s(&base),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while temp_files(d).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no temporary file appeared"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{signal}: {err}");
    assert!(
        temp_files(d).is_empty(),
        "{signal} left {:?}",
        temp_files(d)
    );
    assert!(!base.exists());
}

#[test]
fn term_and_hup_clean_up_like_ctrl_c() {
    for signal in ["TERM", "HUP", "INT"] {
        interrupted_run_leaves_nothing(signal);
    }
}

#[test]
fn argument_checks_come_before_the_model_and_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing_text = d.join("no-such-text.txt");
    for (extra, says) in [
        (&["--perplexity-ctx", "1"][..], "ctx"),
        (
            &["--perplexity-method", "sliding", "--perplexity-stride", "0"][..],
            "stride",
        ),
        (&["--perplexity-chunks", "0"][..], "chunk limit"),
        (
            &[
                "--perplexity-kld-top-k",
                "33",
                "--perplexity-kld-base-out",
                "b.kld",
            ][..],
            "--perplexity-kld-top-k 33",
        ),
        (
            &["--perplexity-kld", "/nonexistent/base.kld"][..],
            "/nonexistent/base.kld",
        ),
        (&["--perplexity-ctx", "9000"][..], "--kv-len 8192"),
    ] {
        let mut args = vec![
            "perplexity",
            "--model",
            "/nonexistent/model",
            "--perplexity",
            s(&missing_text),
        ];
        args.extend(extra);
        let err = refused(lse(&args));
        assert!(
            err.contains(says)
                && !err.contains("/nonexistent/model")
                && !err.contains("no-such-text"),
            "{extra:?}: {err}"
        );
    }
}

/// A value outside an option's set is a usage error (clap's exit status 2) that lists the
/// values, before anything is read.
#[test]
fn option_values_outside_their_set_are_usage_errors_listing_the_values() {
    for (option, value, values) in [
        (
            "--gemm-activations",
            "bf16",
            "reference, weight-dtype, bf16x3",
        ),
        ("--kv-cache-dtype", "q8_0", "bf16, f16, f32"),
    ] {
        let out = lse(&[
            "perplexity",
            "--model",
            "/nonexistent/model",
            "--perplexity",
            "/nonexistent/text",
            option,
            value,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {err}");
        assert!(out.stdout.is_empty(), "{option} {value}");
        assert!(
            err.contains(&format!("invalid value '{value}' for '{option}"))
                && err.contains(&format!("[possible values: {values}]"))
                && !err.contains("/nonexistent"),
            "{option} {value}: {err}"
        );
    }
}

#[test]
fn unclear_messages_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = text(d);

    // A GGUF file cut short after its magic.
    let gguf = d.join("model.gguf");
    fs::write(&gguf, b"GGUF").unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        s(&gguf),
        "--perplexity",
        &text,
    ]));
    assert!(
        err.contains("model.gguf: invalid GGUF file") && err.contains("truncated"),
        "{err}"
    );

    // A valid GGUF of another architecture, and the first part of a split set whose second
    // part is missing.
    let blocks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/gguf/blocks.gguf");
    let err = refused(lse(&[
        "perplexity",
        "--model",
        s(&blocks),
        "--perplexity",
        &text,
    ]));
    assert!(
        err.contains("blocks.gguf: field `general.architecture`: expected one of qwen35, qwen35moe, found \"lse-test\""),
        "{err}"
    );
    let part = d.join("m-00001-of-00002.gguf");
    fs::copy(&blocks, &part).unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        s(&part),
        "--perplexity",
        &text,
    ]));
    assert!(
        err.contains("m-00002-of-00002.gguf: missing file (part of the split GGUF checkpoint"),
        "{err}"
    );

    // An empty token array.
    let tokens = d.join("tokens.json");
    fs::write(&tokens, "[]").unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        &model(),
        "--perplexity-tokens",
        s(&tokens),
    ]));
    assert!(
        err.contains("tokens.json: the JSON array holds no token ids")
            && !err.contains("too little"),
        "{err}"
    );

    // An empty text.
    let empty = d.join("empty.txt");
    fs::write(&empty, "").unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        &model(),
        "--perplexity",
        s(&empty),
    ]));
    assert!(
        err.contains("the text to score is empty") && !err.contains("too little"),
        "{err}"
    );

    // config.json holding a top-level array; a truncated safetensors file.
    let bad_model = d.join("bad-model");
    fs::create_dir(&bad_model).unwrap();
    fs::write(bad_model.join("config.json"), "[1, 2]").unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        s(&bad_model),
        "--perplexity",
        &text,
    ]));
    assert!(
        err.contains(
            "config.json: expected a JSON object of config fields at the top level, found [1,2]"
        ) && !err.contains("field ``"),
        "{err}"
    );
    let src = repo().join("tests/data/models/big_vocab_bf16");
    fs::copy(src.join("config.json"), bad_model.join("config.json")).unwrap();
    let weights = fs::read(src.join("model.safetensors")).unwrap();
    fs::write(
        bad_model.join("model.safetensors"),
        &weights[..weights.len() - 1000],
    )
    .unwrap();
    let err = refused(lse(&[
        "perplexity",
        "--model",
        s(&bad_model),
        "--perplexity",
        &text,
    ]));
    assert!(
        err.contains("model.safetensors")
            && err.contains("truncated")
            && err.contains("(1000 bytes missing)"),
        "{err}"
    );

    // LSE_REQUIRE_DEVICE_KERNELS: only the documented values; with 1 the run goes ahead on
    // the host device, where every operation of the forward pass has a LOOM kernel.
    let env = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_lse"))
            .args([
                "perplexity",
                "--model",
                &model(),
                "--perplexity",
                &text,
                "--perplexity-ctx",
                "64",
            ])
            .env("LSE_REQUIRE_DEVICE_KERNELS", value)
            .output()
            .unwrap()
    };
    let err = refused(env("yes"));
    assert!(
        err.contains("LSE_REQUIRE_DEVICE_KERNELS=\"yes\": expected 1"),
        "{err}"
    );
    ok(env("1"));

    // --ubatch-size above --batch-size runs (and reports) the batch size, as llama.cpp.
    let json = d.join("ub.json");
    let out = ok(lse(&[
        "perplexity",
        "--model",
        &model(),
        "--perplexity",
        &text,
        "--perplexity-ctx",
        "64",
        "--perplexity-chunks",
        "1",
        "--batch-size",
        "32",
        "--ubatch-size",
        "512",
        "--perplexity-output",
        s(&json),
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--ubatch-size 512 is larger than --batch-size 32: running ubatches of 32"),
        "{err}"
    );
    let report: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["config"]["ubatch_size"], 32);
    assert_eq!(report["config"]["batch_size"], 32);
}

#[test]
fn standard_input_is_read_for_dash() {
    let dir = tempfile::tempdir().unwrap();
    let text = text(dir.path());
    let from_file = ok(lse(&[
        "perplexity",
        "--model",
        &model(),
        "--perplexity",
        &text,
        "--quiet",
        "--perplexity-ctx",
        "64",
        "--perplexity-chunks",
        "1",
    ]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args([
            "perplexity",
            "--model",
            &model(),
            "--perplexity",
            "-",
            "--quiet",
            "--perplexity-ctx",
            "64",
            "--perplexity-chunks",
            "1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(&text).unwrap())
        .unwrap();
    let from_stdin = ok(child.wait_with_output().unwrap());
    let a: Value = serde_json::from_slice(&from_file.stdout).unwrap();
    let b: Value = serde_json::from_slice(&from_stdin.stdout).unwrap();
    assert_eq!(a["token_ids_sha256"], b["token_ids_sha256"]);
    assert_eq!(a["mean_nll"], b["mean_nll"]);
}
